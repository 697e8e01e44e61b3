"""Serving one /v1/embeddings request: inputs -> tokens -> one engine request each (pooled in the step, see
engine/pooling.py) -> OpenAI's list of embedding objects, as floats or base64 of little-endian float32.

An input longer than the context is a 400, as OpenAI answers; a client that goes away aborts the engine requests.
A request may carry more inputs (OpenAI allows 2,048) than the replica admits at once: they go in waves of at most
`max_num_seqs`, each admitted when the one before has finished, so a big batch neither fails as "never admissible"
nor fills the waiting queue ahead of other clients.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.pooling import Pooling, PoolingParams
from engine.sampling_params import SamplingParams
from engine.server.async_engine import AsyncEngine, OutputStream
from engine.server.errors import InvalidRequestError
from engine.server.generation import collect_or_abort
from engine.server.protocol import EmbeddingRequest, token_ids
from engine.server.request_context import context_of
from engine.server.tokenization import Tokenization


@dataclass
class EmbeddingUsage:
    """What the request log reads (as generation._Usage): embeddings count input tokens only."""

    prompt_tokens: int
    cached_tokens: int = 0
    stream: bool = False
    first_token_s: float = 0.0

    def as_dict(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens}


async def serve(
    http_request: Request,
    request: EmbeddingRequest,
    engine: AsyncEngine,
    tokenization: Tokenization,
    model_name: str,
    pooling: Pooling,
    hidden_size: int,
    arrival_time_s: float,
) -> Response:
    if request.dimensions is not None and request.dimensions > hidden_size:
        raise InvalidRequestError(
            f"dimensions={request.dimensions} is more than this model's {hidden_size}.", param="dimensions"
        )
    prompts = [
        await tokenization.encode(item)
        if isinstance(item, str)
        else token_ids(item, f"input[{i}]", tokenization.vocab_size)
        for i, item in enumerate(request.inputs)
    ]
    if not all(prompts):
        raise InvalidRequestError("An input tokenizes to no tokens.", param="input")
    params = SamplingParams(max_tokens=1, temperature=0.0, pooling=PoolingParams(pooling, request.dimensions))
    response_id = "embd-" + uuid.uuid4().hex
    usage = EmbeddingUsage(sum(len(p) for p in prompts))
    context_of(http_request.scope).generation = usage
    vectors: list[list[float]] = []
    wave = engine.max_num_seqs
    for first in range(0, len(prompts), wave):
        ids = [f"{response_id}-{i}" for i in range(first, min(first + wave, len(prompts)))]
        stream = await engine.add_requests(
            ids, prompts[first : first + wave], params, request.cache_salt, arrival_time_s
        )
        done = await collect_or_abort(http_request, stream, engine, _collect(stream, len(ids)))
        if done is None:
            return Response(status_code=499)  # the client is gone; nobody reads this
        vectors += done
    return JSONResponse(
        {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": _encode(v, request.encoding_format)}
                for i, v in enumerate(vectors)
            ],
            "model": model_name,
            "usage": usage.as_dict(),
        }
    )


async def _collect(stream: OutputStream, count: int) -> list[list[float]]:
    vectors: list[list[float] | None] = [None] * count
    async for index, output in stream:
        if output.finished:
            vectors[index] = output.embedding
    if any(v is None for v in vectors):  # an engine request ended without its vector (aborted)
        raise InvalidRequestError("The embedding request was aborted.", param="input")
    return vectors  # type: ignore[return-value]  # checked above


def _encode(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
    return vector
