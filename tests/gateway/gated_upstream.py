"""A streaming upstream whose streams stop after their first chunk until the test opens the gate: requests held in
flight for exactly as long as a test needs (through a Redis restart, a gateway's death)."""

from __future__ import annotations

import asyncio
import json
import threading

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

PROMPT_TOKENS = 7


class GatedUpstream:
    def __init__(self, pieces: int = 3):
        self.pieces = pieces
        self.gate = threading.Event()
        self.waiting = 0  # streams held at the gate now
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request):
        await request.json()
        return StreamingResponse(self.stream(), media_type="text/event-stream")

    async def stream(self):
        for i in range(self.pieces):
            chunk = {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "tiny",
                "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}],
            }
            yield f"data: {json.dumps(chunk)}\n\n"
            if i == 0:
                self.waiting += 1
                while not self.gate.is_set():
                    await asyncio.sleep(0.01)
                self.waiting -= 1
        usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": self.pieces}
        usage["total_tokens"] = PROMPT_TOKENS + self.pieces
        yield f"data: {json.dumps({'id': 'c', 'object': 'chat.completion.chunk', 'choices': [], 'usage': usage})}\n\n"
        yield "data: [DONE]\n\n"
