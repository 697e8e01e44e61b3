"""One request's state on its way through the request path, and the names of where it is and how it ended.

    RECEIVED -> IDENTIFIED -> AUTHED -> ADMITTED -> ROUTED -> STREAMING -> SETTLED
        |            |           |          |          |           |
        +------------+-----------+----------+----------+-----------+--> SETTLED (refused, failed, client gone, ...)

A stage sets the fields it owns and moves `phase` on; `phase` says which fields are set (IDENTIFIED: the key and
tenant; AUTHED: also the body and model; ADMITTED: the prompt and `admission`). Whatever happened, the request leaves through settlement.py,
which is the only place that settles a reservation.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any

from gateway.admin.tenants import ApiKey, Tenant
from gateway.config import ModelConfig
from gateway.request.overlap import Needs
from gateway.request.parse import ParsedRequest
from gateway.request.prompts import Prompt
from gateway.request.stream import StreamScanner
from gateway.routing import base as routing
from gateway.store.base import Admission
from sluicegate.responses import ResponsesStream


class RequestPhase(enum.IntEnum):
    """Ordered: `phase >= AUTHED` means auth and parsing are done."""

    RECEIVED = 0
    IDENTIFIED = 1
    """The API key and its tenant known (a refusal from here on is the tenant's, in metrics and the access log)."""
    AUTHED = 2
    """Key, tenant, model and body known and valid; the pre-check and input guardrails run next."""
    ADMITTED = 3
    """The store took the reservation (`admission` is set): it must be settled."""
    ROUTED = 4
    """A replica took the request (answered 2xx)."""
    STREAMING = 5
    """The response has started towards the client."""
    SETTLED = 6


class Outcome(enum.StrEnum):
    """How the upstream attempt ended, as the router's `release` reads it (the same strings as routing/base.py)."""

    OK = routing.OK
    ERROR_BEFORE_FIRST_BYTE = routing.ERROR_BEFORE_FIRST_BYTE
    ERROR_MID_STREAM = routing.ERROR_MID_STREAM
    CLIENT_DISCONNECT = routing.CLIENT_DISCONNECT
    NOT_ADMITTED = routing.NOT_ADMITTED
    """An overlapped request the admission refused after all: the replica is not to blame."""


@dataclass
class Delivery:
    """What reached the client: settlement charges by it when the upstream reports no usage."""

    status: int = 0
    """The HTTP status answered (499: the client left); 0 until one is."""
    error_code: str | None = None
    """The error answered, when the answer was one: its OpenAI `code`, else its `type` (the access log's `error`)."""
    delivered_any: bool = False
    scanner: StreamScanner | None = None
    """A stream's scanner: its usage chunk and the text it delivered."""
    usage: dict[str, Any] | None = None
    """The upstream's usage object, when it sent one."""
    completion_text: str | None = None
    """A JSON answer's text, kept only when its usage has no completion count."""
    client_gone: bool = False
    handed_over_tokens: int = 0
    """Prompt tokens whose KV a prefill replica computed and handed to the answering decode replica, which reports
    them as cached; 0 without a handoff."""
    prefill_cached_tokens: int = 0
    """Of the prompt, what the prefill replica served from its own prefix cache (Handoff.cached_tokens)."""
    responses_stream: ResponsesStream | None = None
    """A /v1/responses stream's translator: an answer cut short (the drain's end) fails through it, as a
    `response.failed` event, like any other error on that stream."""


@dataclass
class RequestContext:
    kind: str
    """The endpoint: parse.CHAT, COMPLETIONS, EMBEDDINGS or RESPONSES (what the replica is asked: parsed.kind)."""
    request_id: str
    """The gateway's unique id for this request (the store's in-flight entry, the replica's x-request-id)."""
    shown_request_id: bytes
    """The x-request-id the client sees: its own when it sent a usable one, else request_id."""
    received_s: float
    """perf_counter() at arrival: time to first chunk is measured from here."""
    traceparent: bytes | None
    """The client's W3C traceparent header, passed on upstream while tracing is off."""
    phase: RequestPhase = RequestPhase.RECEIVED
    delivery: Delivery = field(default_factory=Delivery)

    # Set by admission.prepare (key and tenant: phase IDENTIFIED, the rest: AUTHED); reading them earlier raises
    # AttributeError.
    key: ApiKey = field(init=False)
    tenant: Tenant = field(init=False)
    parsed: ParsedRequest = field(init=False)
    raw_body: bytes = field(init=False)
    model: ModelConfig = field(init=False)
    lease_end_ms: int = field(init=False)
    """Wall-clock ms at which the in-flight lease ends: lets a replayed settlement tell it already ran."""
    reserved_out: int = field(init=False)
    """The output reservation as this gateway computes it (the store's own answer is admission.reserved_out)."""
    alongside: asyncio.Task[None] | None = None
    """The input checks running while the request goes upstream (hooks.check_alongside); None when there are none."""

    # Set by admission.admit.
    prompt: Prompt = field(init=False)
    overlap_needs: Needs | None = None
    """What the overlap gate took for this request when it is sent before its admission answers."""
    admission: Admission | None = None
    """The store's reservation: set once it admitted the request, and then settled exactly once."""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    """Response headers every answer after admission carries (x-ratelimit-*, x-request-id)."""

    @property
    def authed(self) -> bool:
        return self.phase >= RequestPhase.AUTHED
