"""Server-sent events framing: OpenAI's `data: {...}` chunks ending with `data: [DONE]`, and named events."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from starlette.responses import StreamingResponse

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keepalive\n\n"
_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def data(obj: dict) -> bytes:
    return b"data: " + _dumps(obj) + b"\n\n"


def event(name: str, obj: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + _dumps(obj) + b"\n\n"


def response(chunks: AsyncIterator[bytes], headers: dict | None = None) -> StreamingResponse:
    return StreamingResponse(chunks, media_type="text/event-stream", headers={**_HEADERS, **(headers or {})})


def _dumps(obj: dict) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
