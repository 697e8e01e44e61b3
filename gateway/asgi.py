"""Plain-ASGI helpers for the hot path (no Request/Response objects per request)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from starlette.types import Receive, Scope, Send

from gateway.errors import ApiError

JSON = (b"content-type", b"application/json")
MAX_BODY_BYTES = 32 << 20


# The whole body must arrive within this: a client that sends its headers and then trickles (or withholds) the body
# would otherwise hold a connection and a task for as long as it likes (slowloris). 32 MiB in 60 s is ~4.5 Mbit/s.
BODY_TIMEOUT_S = 60.0


async def read_body(receive: Receive, max_bytes: int = MAX_BODY_BYTES) -> bytes:
    timeout_s = BODY_TIMEOUT_S
    try:
        async with asyncio.timeout(timeout_s):
            return await _read_body(receive, max_bytes)
    except TimeoutError:
        raise ApiError(
            408, f"The request body was not received within {timeout_s:g} s.", "invalid_request_error", "timeout"
        ) from None


async def _read_body(receive: Receive, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise ApiError(413, f"Request body exceeds {max_bytes} bytes.", "invalid_request_error", "body_too_large")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class ClientGone(Exception):
    """The client disconnected before its request was read."""


async def send_bytes(send: Send, status: int, body: bytes, headers: Sequence[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, error: ApiError, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    extra = [(k.encode(), v.encode()) for k, v in error.headers.items()]
    await send_bytes(send, error.status, error.body(), [JSON, *headers, *extra])


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None
