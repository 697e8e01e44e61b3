"""A request and its sequences. A request with n choices prefills its prompt once as sequence 0 and then forks
n - 1 more that share the prompt's blocks (copy-on-write)."""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from engine.block_pool import KVBlock
from engine.detokenizer import IncrementalDetokenizer
from engine.kv_transfer.params import Handoff
from engine.outputs import TokenLogprob
from engine.pooling import Pooling, PoolingParams
from engine.sampler import SamplingRow
from engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    import xgrammar as xgr


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    SWAPPED = "swapped"
    FINISHED = "finished"


_seq_ids = itertools.count()


class Sequence:
    """Each field has one writer, named beside it: LLMEngine (tokens and output), Scheduler (status),
    KVCacheManager (KV state: computed tokens, blocks), the speculator (the draft model's progress)."""

    # Slotted: the step reads a handful of these per sequence, at batch 64 thousands of lookups a step.
    __slots__ = (
        "seq_id",
        "request",
        "index",
        "num_prompt_tokens",
        "status",
        "num_computed_tokens",
        "block_table",
        "block_hashes",
        "num_cached_blocks",
        "host_block_ids",
        "num_draft_computed",
        "token_ids",
        "output_ids",
        "generator",
        "sampling_row",
        "grammar",
        "detokenizer",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "num_emitted_tokens",
        "num_emitted_logprobs",
        "pooling",
        "pooled_sum",
        "embedding",
    )

    def __init__(
        self,
        request: Request,
        index: int,
        token_ids: list[int],
        detokenizer: IncrementalDetokenizer,
        generator: torch.Generator | None,
    ):
        self.seq_id = next(_seq_ids)
        self.request = request
        self.index = index  # choice index within the request
        self.num_prompt_tokens = len(request.prompt_token_ids)
        # Scheduler: the queue it is in.
        self.status = SequenceStatus.WAITING
        # KVCacheManager: KV state. Block tables only grow in place, or are replaced (engine/input_batch.py).
        self.num_computed_tokens = 0  # tokens whose KV is in the cache
        self.block_table: list[KVBlock] = []
        self.block_hashes: list[int] = []  # hashes of full blocks of token_ids, chained
        self.num_cached_blocks = 0  # leading blocks of block_table registered in the prefix cache
        self.host_block_ids: list[int] = []  # where the KV lives while swapped out
        # The speculator's draft model (reset by KVCacheManager.free, as that KV goes with the blocks).
        self.num_draft_computed = 0  # tokens whose draft-model KV is in the mirror cache (speculative decoding)
        # LLMEngine: tokens, sampling and output.
        self.token_ids = token_ids  # prompt + output
        self.output_ids: list[int] = []  # the output part, kept beside token_ids: read every step, never sliced
        self.generator = generator
        self.sampling_row: SamplingRow | None = None  # made at the first sample, kept (LLMEngine._sampling_row)
        # Structured output: where this sequence's output stands in its grammar (it has accepted every output token).
        # It lives with the sequence, not its KV, so preemption (recompute or swap) leaves it as it is.
        self.grammar: xgr.GrammarMatcher | None = None
        self.detokenizer = detokenizer
        self.logprobs: list[TokenLogprob] | None = [] if request.params.logprobs is not None else None
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self.num_emitted_tokens = 0  # output tokens already handed out in a RequestOutput
        self.num_emitted_logprobs = 0
        # ModelRunner (engine/pooling.py): an embedding request's pooled states, and its vector once the prompt is in.
        self.pooling: PoolingParams | None = request.params.pooling
        self.pooled_sum: torch.Tensor | None = None
        self.embedding: list[float] | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_ids)

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)
        self.output_ids.append(token_id)

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def needs_every_position(self) -> bool:
        """Mean pooling reads each prompt position's state, so a prefix-cache hit (no state this step) is skipped."""
        return self.pooling is not None and self.pooling.pooling is Pooling.MEAN

    @property
    def is_prefilling(self) -> bool:
        return self.num_computed_tokens < self.num_tokens - 1


@dataclass
class Request:
    """Fields after `params` have one writer each, named beside them: LLMEngine or the Scheduler."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    cache_salt: str = ""
    arrival_time: float = field(default_factory=time.monotonic)  # LLMEngine.add_request
    seqs: list[Sequence] = field(default_factory=list)  # LLMEngine: sequence 0, then the forks
    forked: bool = False  # LLMEngine: the n - 1 sibling sequences exist
    max_tokens: int = 0  # LLMEngine: resolved, params.max_tokens or what the context allows
    # LLMEngine: the tokens that end a sequence (params.stop_token_ids, and EOS unless ignore_eos), one set lookup
    # per sampled token.
    stop_token_set: frozenset[int] = frozenset()
    grammar: xgr.CompiledGrammar | None = None  # LLMEngine: params.structured compiled; the request runs once set
    num_cached_tokens: int = 0  # Scheduler: prompt tokens found in the prefix cache at first admission
    first_scheduled_time: float | None = None  # Scheduler
    first_token_time: float | None = None  # LLMEngine
    finished_time: float | None = None  # LLMEngine
    remote_decode: bool = False  # LLMEngine: a prefill whose blocks a decode replica reads (engine/kv_transfer/)
    handoff: Handoff | None = None  # LLMEngine: what it left held for that replica, once finished

    @property
    def is_finished(self) -> bool:
        # Before the fork only sequence 0 exists, so this also covers a request aborted during its prefill.
        return all(s.is_finished for s in self.seqs)
