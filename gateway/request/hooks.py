"""Where guardrails plug into the request path (guardrails/ provides the real ones; the gateway never imports it).

- `check_input` runs after auth and the cheap pre-check, before tokenization and admission: it may return a
  modified body (redaction) or raise ApiError (block).
- `check_alongside` starts, just before `check_input`, the checks a tenant's policy runs while the request goes
  upstream (a guardrail policy's `injection_alongside`): the gateway sends the request once it is admitted and
  releases none of the answer until the returned task ends; if it raises ApiError, the request is cancelled at its
  replica and the client gets that error instead (admission.py, `cleared`).
- `check_output` sees a non-streamed response body (bytes in, bytes out).
- `output_transformer` returns, per request, an object that rewrites the streamed SSE bytes (redaction with a
  bounded hold-back) or None to pass the stream through untouched.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from gateway.admin.tenants import Tenant
from gateway.request.parse import JsonObject


class StreamTransformer(Protocol):
    blocked: bool
    """True once the transformer has ended the stream with an error event: the rest of the answer is unwanted."""

    def feed(self, data: bytes) -> bytes:
        """Complete SSE events in (the last one is `data: [DONE]`), the bytes to send now out (may hold back)."""

    def flush(self) -> bytes:
        """At the end of the stream: whatever is still held back."""


class RequestHooks(Protocol):
    async def check_input(self, tenant: Tenant, route_kind: str, body: JsonObject) -> JsonObject: ...

    def check_alongside(self, tenant: Tenant, route_kind: str, body: JsonObject) -> asyncio.Task[None] | None: ...

    async def check_output(self, tenant: Tenant, route_kind: str, response_body: bytes) -> bytes: ...

    def output_transformer(self, tenant: Tenant, route_kind: str, body: JsonObject) -> StreamTransformer | None: ...


class NoHooks:
    """Guardrails off: the default until guardrails/ is wired in."""

    async def check_input(self, tenant: Tenant, route_kind: str, body: JsonObject) -> JsonObject:
        return body

    def check_alongside(self, tenant: Tenant, route_kind: str, body: JsonObject) -> asyncio.Task[None] | None:
        return None

    async def check_output(self, tenant: Tenant, route_kind: str, response_body: bytes) -> bytes:
        return response_body

    def output_transformer(self, tenant: Tenant, route_kind: str, body: JsonObject) -> StreamTransformer | None:
        return None
