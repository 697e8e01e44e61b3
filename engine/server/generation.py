"""Serving one generation request (completions or chat): prompts -> engine -> a whole response or an SSE stream.

Streams follow OpenAI's chunk order: (chat) a role delta per choice, content deltas each carrying its choice
`index`, a finish chunk per choice with an empty delta, then with `stream_options.include_usage` a last chunk with
`choices: []` and the usage, then `data: [DONE]`. A client that goes away (stream or not) aborts its engine requests,
which frees their KV blocks before the next step.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.kv_transfer.params import Handoff
from engine.kv_transfer.pull_plan import PullPlan
from engine.outputs import CompletionOutput, RequestOutput
from engine.server import sse
from engine.server.async_engine import AsyncEngine, OutputStream
from engine.server.errors import APIError, InvalidRequestError
from engine.server.kv_transfer import KVTransferService
from engine.server.protocol import GenerateRequest, token_ids
from engine.server.request_context import context_of
from engine.server.tokenization import Tokenization
from engine.tools import response as tool_response

T = TypeVar("T")


@dataclass
class _Usage:
    """Token counts per prompt, from the latest output of each; summed for the response."""

    prompt_tokens: list[int]
    cached_tokens: list[int]
    stream: bool
    completion_tokens: dict[int, int] = field(default_factory=dict)  # choice index -> tokens
    first_token_s: float = 0.0
    """time.monotonic() when the first output arrived (the request log's TTFT); 0.0 until then."""

    def update(self, prompt_index: int, output: RequestOutput, n: int) -> None:
        if not self.first_token_s:
            self.first_token_s = time.monotonic()
        self.cached_tokens[prompt_index] = output.num_cached_tokens
        for choice in output.outputs:
            self.completion_tokens[prompt_index * n + choice.index] = len(choice.token_ids)

    def as_dict(self) -> dict:
        prompt, completion = sum(self.prompt_tokens), sum(self.completion_tokens.values())
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": sum(self.cached_tokens)},
        }


async def prompt_token_ids(request: GenerateRequest, tokenization: Tokenization) -> list[list[int]]:
    if request.messages is not None:
        tools = request.tools.tools if request.tools is not None else None
        prompts = [await tokenization.encode_chat(request.messages, tools=tools)]
    else:
        prompts = []
        assert request.prompts is not None  # GenerateRequest requires prompts or messages
        for i, prompt in enumerate(request.prompts):
            if isinstance(prompt, str):
                prompts.append(await tokenization.encode(prompt))
            else:
                prompts.append(token_ids(prompt, f"prompt[{i}]", tokenization.vocab_size))
    for prompt in prompts:
        if not prompt:
            raise InvalidRequestError("The prompt is empty (it tokenizes to no tokens).", param="prompt")
    return prompts


async def serve(
    http_request: Request,
    request: GenerateRequest,
    fmt,
    engine: AsyncEngine,
    tokenization: Tokenization,
    model_name: str,
    arrival_time_s: float,
    kv_transfer: KVTransferService | None = None,
) -> Response:
    prompts = await prompt_token_ids(request, tokenization)
    pulled = await _pull(request, prompts, kv_transfer)
    response_id = fmt.id_prefix + uuid.uuid4().hex
    request_ids = [f"{response_id}-{i}" for i in range(len(prompts))]
    stream = await engine.add_requests(
        request_ids, prompts, request.params, request.cache_salt, arrival_time_s, request.kv_transfer, pulled
    )
    head = {"id": response_id, "object": fmt.object_name, "created": int(time.time()), "model": model_name}
    usage = _Usage([len(p) for p in prompts], [0] * len(prompts), request.stream)
    context_of(http_request.scope).generation = usage  # the request log reads its counts when the request ends
    if request.stream:
        chunk_head = {**head, "object": fmt.chunk_object_name}
        return sse.response(_chunks(stream, request, fmt, engine, chunk_head, usage))
    return await _whole(http_request, stream, request, fmt, engine, head, usage, kv_transfer)


async def _pull(
    request: GenerateRequest, prompts: list[list[int]], kv_transfer: KVTransferService | None
) -> PullPlan | None:
    """Check a request's kv_transfer_params against this replica's role; for a decode, read the prefill's blocks."""
    wanted = request.kv_transfer
    if wanted is None:
        return None
    role = kv_transfer.role if kv_transfer is not None else "both"
    if wanted.remote_decode and role != "prefill" or wanted.remote_prefill is not None and role != "decode":
        asked = "do_remote_decode" if wanted.remote_decode else "do_remote_prefill"
        raise InvalidRequestError(
            f"This replica runs with --kv-role {role}: it does not take kv_transfer_params.{asked}.",
            param="kv_transfer_params",
        )
    if len(prompts) != 1:
        raise InvalidRequestError("kv_transfer_params needs a single prompt.", param="prompt")
    if wanted.remote_prefill is None or kv_transfer is None:
        return None
    return await kv_transfer.pull(prompts[0], request.cache_salt, wanted.remote_prefill)


async def collect_or_abort(
    http_request: Request, stream: OutputStream, engine: AsyncEngine, collect: Coroutine[Any, Any, T]
) -> T | None:
    """`collect`'s result (it reads `stream` to its end), or None when the client left first; either way the
    stream's engine requests are aborted if they still run. Raises APIError if the engine died."""
    collector = asyncio.ensure_future(collect)
    disconnect = asyncio.ensure_future(_wait_for_disconnect(http_request))
    try:
        await asyncio.wait({collector, disconnect}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        disconnect.cancel()
        if not collector.done():
            collector.cancel()
        engine.abort(stream)  # no-op when every request finished
    if not collector.done() or collector.cancelled():
        return None
    return collector.result()


async def _whole(
    http_request,
    stream: OutputStream,
    request,
    fmt,
    engine,
    head: dict,
    usage: _Usage,
    kv_transfer: KVTransferService | None,
) -> Response:
    handoffs: dict[str, Handoff] = {}
    collect = _collect(stream, request.params.n, usage, handoffs)
    choices = await collect_or_abort(http_request, stream, engine, collect)
    if choices is None:
        return Response(status_code=499)  # the client is gone; nobody reads this (a handoff expires unread)
    want_logprobs = request.params.logprobs is not None
    body = {
        **head,
        "choices": [
            fmt.choice(index, c.text, c.logprobs if want_logprobs else None, c.finish_reason)
            for index, c in sorted(choices.items())
        ],
        "usage": usage.as_dict(),
    }
    if request.tool_parser is not None:
        for choice in body["choices"]:
            choice["message"], called = tool_response.message(request.tool_parser, choice["message"]["content"])
            choice["finish_reason"] = tool_response.finish_reason(choice["finish_reason"], called)
    if request.kv_transfer is not None and request.kv_transfer.remote_decode:
        assert kv_transfer is not None  # _pull refused do_remote_decode on a replica without one
        request_id, handoff = next(iter(handoffs.items()), (stream.request_ids[0], None))
        local_address = http_request.scope.get("server")
        body["kv_transfer_params"] = kv_transfer.handoff_params(handoff, request_id, local_address)
    return JSONResponse(body)


async def _collect(
    stream: OutputStream, n: int, usage: _Usage, handoffs: dict[str, Handoff]
) -> dict[int, CompletionOutput]:
    """Every choice's final output; `handoffs` gets each finished prefill's held blocks, by engine request id."""
    choices: dict[int, CompletionOutput] = {}
    async for prompt_index, output in stream:
        usage.update(prompt_index, output, n)
        for choice in output.outputs:
            choices[prompt_index * n + choice.index] = choice
        if output.kv_handoff is not None:
            handoffs[output.request_id] = output.kv_handoff
    return choices


async def _wait_for_disconnect(http_request: Request) -> None:
    # The body is already read, so the next ASGI message is the disconnect (if the client leaves).
    while (await http_request.receive())["type"] != "http.disconnect":
        pass


async def _chunks(stream: OutputStream, request: GenerateRequest, fmt, engine, head: dict, usage: _Usage):
    n, want_logprobs = request.params.n, request.params.logprobs is not None
    extra = {"usage": None} if request.include_usage else {}
    text_offsets: dict[int, int] = {}
    finished: set[int] = set()
    parser = request.tool_parser
    tool_deltas: dict[int, tool_response.ToolDeltas] = {}  # choice index -> its calls parsed so far
    try:
        for index in range(len(usage.prompt_tokens) * n):
            for delta in fmt.opening_deltas(index):
                yield sse.data({**head, "choices": [delta], **extra})
        async for prompt_index, output in stream:
            usage.update(prompt_index, output, n)
            chunks = []  # one write per step, however many choices advanced
            for choice in output.outputs:
                index = prompt_index * n + choice.index
                if parser is not None:
                    deltas = tool_deltas.setdefault(index, tool_response.ToolDeltas(parser))
                    payloads = deltas.feed(choice.delta_text)
                    if choice.finish_reason and index not in finished:
                        payloads += deltas.finish()
                    logprobs = choice.delta_logprobs if want_logprobs else None
                    for delta in _tool_deltas(index, payloads, logprobs, fmt):
                        chunks.append(sse.data({**head, "choices": [delta], **extra}))
                elif choice.delta_text or (want_logprobs and choice.delta_logprobs):
                    offset = text_offsets.get(index, 0)
                    logprobs = choice.delta_logprobs if want_logprobs else None
                    delta = fmt.delta(index, choice.delta_text, logprobs, offset)
                    chunks.append(sse.data({**head, "choices": [delta], **extra}))
                    text_offsets[index] = offset + len(choice.delta_text)
                if choice.finish_reason and index not in finished:
                    finished.add(index)
                    reason = choice.finish_reason
                    if index in tool_deltas:
                        reason = tool_response.finish_reason(reason, tool_deltas[index].called)
                    finish = fmt.finish_delta(index, reason)
                    chunks.append(sse.data({**head, "choices": [finish], **extra}))
            if chunks:
                yield b"".join(chunks)
        if request.include_usage:
            yield sse.data({**head, "choices": [], "usage": usage.as_dict()})
    except APIError as exc:
        # Headers are gone already: the error travels as an event, which the openai client raises as APIError.
        yield sse.data(exc.body())
    finally:
        engine.abort(stream)  # no-op when every request finished; else the client left mid-stream
    yield sse.DONE


def _tool_deltas(index: int, payloads: list[dict], logprobs, fmt) -> list[dict]:
    """A step's tool-call and content deltas; its logprobs ride on the first (on an empty delta if there is none)."""
    deltas = [{"index": index, "delta": payload, "logprobs": None, "finish_reason": None} for payload in payloads]
    if logprobs:
        if not deltas:
            deltas.append({"index": index, "delta": {}, "logprobs": None, "finish_reason": None})
        deltas[0]["logprobs"] = fmt.logprobs(logprobs, 0)
    return deltas
