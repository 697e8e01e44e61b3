"""What the engine hands back after each step: one RequestOutput per request that advanced.

The engine makes a CompletionOutput and a RequestOutput per request per step, with positional arguments (a call
with a dozen keywords costs twice as much): keep the fields' order, or update LLMEngine._make_outputs with it.
Slotted: no per-object dict, and attribute reads and writes are cheaper."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.kv_transfer.params import Handoff


@dataclass(slots=True)
class TokenLogprob:
    token_id: int
    logprob: float
    # (token_id, logprob) of the most likely tokens at this position, best first.
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass(slots=True)
class CompletionOutput:
    """One of a request's n choices. `delta_*` hold only what this step added (for streaming); the cumulative
    fields hold everything so far. `text` never ends inside a UTF-8 character or in text a stop string takes back.
    `token_ids` and `logprobs` are the sequence's own lists (copying them every step would cost O(output) per token):
    they keep growing until the choice finishes, so copy them to keep a snapshot of an unfinished one."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    delta_text: str = ""
    delta_token_ids: list[int] = field(default_factory=list)
    delta_logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: str | int | None = None  # the stop string or stop token id that ended it

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    # Wall-clock stamps (time.monotonic()) for latency metrics.
    arrival_time: float = 0.0
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    embedding: list[float] | None = None  # an embedding request's vector, on its finished output
    kv_handoff: Handoff | None = None  # a finished prefill's blocks, held for a decode replica (engine/kv_transfer/)
