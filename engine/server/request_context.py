"""Per-request context as plain ASGI middleware: arrival time, `x-request-id` (echoed on the response, generated when
absent), and the W3C `traceparent` the gateway sends (kept on the request for tracing; malformed ones are dropped,
as the W3C spec says)."""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")
_MAX_REQUEST_ID_CHARS = 256


class Generation(Protocol):
    """A generation request's counts and timings as it runs; never its text."""

    stream: bool
    first_token_s: float
    """time.monotonic() of the first generated token; 0.0 until one is."""

    def as_dict(self) -> dict:
        """OpenAI's usage object: prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens."""


@dataclass
class RequestContext:
    request_id: str
    traceparent: str | None
    arrival_time_s: float  # time.monotonic()
    generation: Generation | None = None
    """Set by a generation request (generation.serve): what its request-log line reports (request_log.py)."""


def context_of(scope: Scope) -> RequestContext:
    return scope["state"]["request_context"]


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrival_time_s = time.monotonic()
        headers = dict((k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"])
        request_id = headers.get("x-request-id", "")[:_MAX_REQUEST_ID_CHARS] or uuid.uuid4().hex
        traceparent = headers.get("traceparent", "").strip().lower()
        context = RequestContext(request_id, traceparent if _TRACEPARENT.match(traceparent) else None, arrival_time_s)
        scope.setdefault("state", {})["request_context"] = context

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)["x-request-id"] = request_id
            await send(message)

        await self.app(scope, receive, send_with_id)
