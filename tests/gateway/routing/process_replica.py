"""A replica in its own process for tests that kill and restart one: /health, /metrics and streamed completions.

`python -m tests.gateway.routing.process_replica PORT` serves on 127.0.0.1:PORT until killed. Each completion
streams `max_tokens` SSE chunks then `[DONE]`; it computes nothing. A separate process (unlike fake_replica.py's
thread) so SIGKILL really closes its socket and a restart on the same port is a new process, as in production.
"""

from __future__ import annotations

import asyncio
import json
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route


async def health(request: Request) -> Response:
    return PlainTextResponse("ok")


async def metrics(request: Request) -> Response:
    return PlainTextResponse("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n")


async def completions(request: Request) -> Response:
    body = await request.json()

    async def stream():
        for i in range(int(body.get("max_tokens", 4))):
            await asyncio.sleep(0.01)  # a stream that stays open a little, so the 10 streams overlap
            yield f"data: {json.dumps({'choices': [{'index': 0, 'text': f't{i}'}]})}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


def main(port: int) -> None:
    routes = [Route("/health", health), Route("/metrics", metrics)]
    app = Starlette(routes=[*routes, Route("/v1/completions", completions, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")


if __name__ == "__main__":
    main(int(sys.argv[1]))
