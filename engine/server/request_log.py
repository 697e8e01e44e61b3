"""The replica's request log: one JSON line per finished request on /v1/completions, /v1/chat/completions and /v1/embeddings
on the `sluicegate.engine.requests` logger, which the server sends to stdout (`--no-request-log` turns it off).
Refusals (400, 413, 503 while draining or full) are logged too; probes, scrapes and /tokenize are not. Never text:

    {"time": "2026-12-01T23:59:59.123Z", "request_id": "req-1a2b3c4d-17", "endpoint": "/v1/chat/completions",
     "model": "tiny", "status": 200, "prompt_tokens": 812, "completion_tokens": 64, "cached_tokens": 800,
     "ttft_ms": 35.0, "duration_ms": 298.1, "stream": true}

`request_id` is the `x-request-id` the request came with (the gateway's id for it, so the two logs join), else the
replica's own. A stream's line is written when its last byte has been sent (or the client left).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.server.request_context import context_of
from sluicegate.json_logs import JsonLines

REQUEST_LOGGER = "sluicegate.engine.requests"
LOGGED_PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/v1/embeddings"})


class RequestLogMiddleware:
    """Inside RequestContextMiddleware (it reads the request's context)."""

    def __init__(self, app: ASGIApp, model: str, enabled: bool = True) -> None:
        self.app = app
        self.model = model
        self.enabled = enabled
        self._lines = JsonLines(REQUEST_LOGGER)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.enabled or scope["type"] != "http" or scope["path"] not in LOGGED_PATHS:
            await self.app(scope, receive, send)
            return
        status = 0

        async def send_and_watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_watch)
        finally:
            self._write(scope, status or 500)

    def _write(self, scope: Scope, status: int) -> None:
        context = context_of(scope)
        generation = context.generation
        usage: dict[str, Any] = generation.as_dict() if generation is not None else {}
        first_token_s = generation.first_token_s if generation is not None else 0.0
        line = {
            "time": datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
            "request_id": context.request_id,
            "endpoint": scope["path"],
            "model": self.model,
            "status": status,
            "prompt_tokens": usage.get("prompt_tokens", 0),
            "completion_tokens": usage.get("completion_tokens", 0),
            "cached_tokens": usage.get("prompt_tokens_details", {}).get("cached_tokens", 0),
            "ttft_ms": round((first_token_s - context.arrival_time_s) * 1000, 1) if first_token_s else None,
            "duration_ms": round((time.monotonic() - context.arrival_time_s) * 1000, 1),
            "stream": generation.stream if generation is not None else None,
        }
        self._lines.write(json.dumps(line))
