"""An OpenAI-compatible upstream on loopback that answers a chat request with its last message's text: whatever
the prompt carried (a secret, an e-mail address) comes back in the completion, streamed in word-sized chunks."""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


class EchoUpstream:
    def __init__(self) -> None:
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/health", lambda request: JSONResponse({"status": "ok"}), methods=["GET"]),
            ]
        )

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        answer = str(body["messages"][-1]["content"])
        usage = {
            "prompt_tokens": 9,
            "completion_tokens": len(answer.split()),
            "total_tokens": 9 + len(answer.split()),
            "prompt_tokens_details": {"cached_tokens": 3},
        }
        head = {"id": "echo", "created": 0, "model": body.get("model")}
        if not body.get("stream"):
            message = {"role": "assistant", "content": answer}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            return JSONResponse({**head, "object": "chat.completion", "choices": [choice], "usage": usage})

        async def events():
            chunk = {**head, "object": "chat.completion.chunk"}
            for word in answer.split(" "):
                delta = {"index": 0, "delta": {"content": word + " "}, "finish_reason": None}
                yield f"data: {json.dumps({**chunk, 'choices': [delta]})}\n\n"
            yield f"data: {json.dumps({**chunk, 'choices': [{'index': 0, 'delta': {}, 'finish_reason': 'stop'}]})}\n\n"
            yield f"data: {json.dumps({**chunk, 'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")
