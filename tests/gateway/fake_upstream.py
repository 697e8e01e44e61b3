"""A small OpenAI-compatible upstream for gateway tests: a real Starlette app served on loopback.

Behaviour is steered per request by an extra body field the gateway passes through untouched:
    "fake": {"tokens": 5, "usage": true, "die_after": 2, "delay_s": 0.5, "status": 500, "chunk_delay_s": 0.05,
             "prompt_tokens": 7, "retry_after": "5",     # retry_after: that header on the `status` answer
             "cached_tokens": 4}                         # usage.prompt_tokens_details.cached_tokens
    "usage": "no_completion_tokens" sends usage without completion_tokens.
Every request body it receives is kept in `received`; streams the client abandoned are counted in `cancelled`.
/v1/embeddings answers a small vector per input.
"""

from __future__ import annotations

import asyncio
import json
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

TOKEN = "tok "


class FakeUpstream:
    def __init__(self):
        self.received: list[dict] = []
        self.headers: list[dict] = []
        self.cancelled = 0
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/embeddings", self.embeddings, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/health", lambda r: JSONResponse({"ok": True}), methods=["GET"]),
            ]
        )

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    async def embeddings(self, request: Request) -> Response:
        """One two-dimensional vector per input; usage with `fake.prompt_tokens` (default 11)."""
        body = await request.json()
        self.received.append(body)
        self.headers.append(dict(request.headers))
        raw = body["input"]
        inputs = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else raw
        prompt_tokens = int((body.get("fake") or {}).get("prompt_tokens", 11))
        data = [{"object": "embedding", "index": i, "embedding": [float(i), 1.0]} for i in range(len(inputs))]
        usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
        return JSONResponse({"object": "list", "data": data, "model": body.get("model"), "usage": usage})

    async def chat(self, request: Request) -> Response:
        return await self._answer(request, chat=True)

    async def completions(self, request: Request) -> Response:
        return await self._answer(request, chat=False)

    async def _answer(self, request: Request, chat: bool) -> Response:
        body = await request.json()
        self.received.append(body)
        self.headers.append(dict(request.headers))
        return await self._respond(body, chat)

    async def _respond(self, body: dict, chat: bool) -> Response:
        """The answer to a recorded request (a subclass changes it here)."""
        fake = body.get("fake") or {}
        if fake.get("delay_s"):
            await asyncio.sleep(fake["delay_s"])
        if fake.get("status"):
            error = {"error": {"message": "fake failure", "type": "server_error", "param": None, "code": None}}
            headers = {"retry-after": fake["retry_after"]} if "retry_after" in fake else None
            return JSONResponse(error, status_code=fake["status"], headers=headers)
        num_tokens = int(fake.get("tokens", body.get("max_tokens") or 3))
        usage = {
            "prompt_tokens": int(fake.get("prompt_tokens", 11)),
            "completion_tokens": num_tokens,
            "total_tokens": int(fake.get("prompt_tokens", 11)) + num_tokens,
        }
        if "cached_tokens" in fake:
            usage["prompt_tokens_details"] = {"cached_tokens": int(fake["cached_tokens"])}
        with_usage = fake.get("usage", True)
        if with_usage == "no_completion_tokens":  # a non-conforming upstream: usage without the output count
            del usage["completion_tokens"]
        if not body.get("stream"):
            text = TOKEN * num_tokens
            choice = (
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                if chat
                else {"index": 0, "text": text, "finish_reason": "length"}
            )
            out = {
                "id": "cmpl-fake",
                "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()),
                "model": body.get("model"),
                "choices": [choice],
            }
            if with_usage:
                out["usage"] = usage
            return JSONResponse(out)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage")) and with_usage
        return StreamingResponse(
            self._stream(body, chat, num_tokens, usage, include_usage, fake), media_type="text/event-stream"
        )

    async def _stream(self, body, chat, num_tokens, usage, include_usage, fake):
        kind = "chat.completion.chunk" if chat else "text_completion"
        try:
            for i in range(num_tokens):
                if fake.get("die_after") is not None and i == fake["die_after"]:
                    raise RuntimeError("fake upstream dies mid-stream")
                if fake.get("chunk_delay_s"):  # before each chunk: the headers go out at once, the first chunk later
                    await asyncio.sleep(fake["chunk_delay_s"])
                choice = (
                    {"index": 0, "delta": {"content": TOKEN}, "finish_reason": None}
                    if chat
                    else {"index": 0, "text": TOKEN, "finish_reason": None}
                )
                chunk = {
                    "id": "cmpl-fake",
                    "object": kind,
                    "created": 0,
                    "model": body.get("model"),
                    "choices": [choice],
                }
                yield f"data: {json.dumps(chunk)}\n\n"
            if include_usage:
                chunk = {
                    "id": "cmpl-fake",
                    "object": kind,
                    "created": 0,
                    "model": body.get("model"),
                    "choices": [],
                    "usage": usage,
                }
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
