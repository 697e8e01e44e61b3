"""`x-request-id` on every gateway response, errors above all: the id a client quotes to an operator, who finds the
request by it in the access log.

The completion endpoints set theirs on the request path (request/proxy.py: the client's own id when it sent a usable
one, else the gateway's); `RequestIdMiddleware` does the same for everything else the gateway answers (unknown paths,
405s, /v1/models, the admin API), off the hot path.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.asgi import header

REQUEST_ID = b"x-request-id"
_REQUEST_ID_RE = re.compile(rb"[\x21-\x7e]{1,128}")


def client_request_id(scope: Scope) -> bytes | None:
    """The client's own x-request-id, echoed on the response when it is printable ASCII of at most 128 bytes (the
    store and the replica get the gateway's unique id: a client's need not be unique)."""
    value = header(scope, REQUEST_ID)
    return value if value is not None and _REQUEST_ID_RE.fullmatch(value) else None


class RequestIdMiddleware:
    """Adds `x-request-id` to a response that has none: the client's printable one, else a new gateway id."""

    def __init__(self, app: ASGIApp, next_request_id: Callable[[], str]) -> None:
        self.app = app
        self._next_request_id = next_request_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = client_request_id(scope) or self._next_request_id().encode()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if all(key.lower() != REQUEST_ID for key, _ in headers):
                    message["headers"] = [*headers, (REQUEST_ID, request_id)]
            await send(message)

        await self.app(scope, receive, send_with_id)
