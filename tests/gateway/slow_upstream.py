"""An upstream that takes its time: one piece every `delay_s` (a request's `fake_delay_s` overrides it), streamed,
or all at once at the end for a request with `"stream": false`; it counts the requests it received, the answers it
ran to the end and the ones its client cut (the gateway closing the connection is how it cancels upstream work)."""

from __future__ import annotations

import asyncio
import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route


class SlowUpstream:
    def __init__(self, pieces: list[str], delay_s: float):
        self.pieces, self.delay_s = pieces, delay_s
        self.received = self.finished = self.cancelled = 0
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request):
        body = await request.json()
        self.received += 1
        delay_s = body.get("fake_delay_s", self.delay_s)
        if body.get("stream") is False:
            return JSONResponse(await self.whole(delay_s))
        return StreamingResponse(self.stream(delay_s), media_type="text/event-stream")

    async def whole(self, delay_s: float) -> dict:
        try:
            await asyncio.sleep(delay_s * len(self.pieces))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1
        n = len(self.pieces)
        message = {"role": "assistant", "content": "".join(self.pieces)}
        return {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "tiny",
            "choices": [{"index": 0, "message": message, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n},
        }

    async def stream(self, delay_s: float):
        try:
            for piece in self.pieces:
                chunk = {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "tiny",
                    "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
                }
                yield f"data: {json.dumps(chunk)}\n\n"
                await asyncio.sleep(delay_s)
            n = len(self.pieces)
            usage = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}
            yield f"data: {json.dumps({'id': 'c', 'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"
            self.finished += 1
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
