"""Step 8 of the request path: the one place a request ends. `Reservation` is entered when a request arrives and
left however it ends (answered, refused, upstream error, timeout, client disconnect, cancellation at shutdown); on
leaving it settles what admission reserved, if it reserved anything, releases the upstream attempt and counts the
answer. `__aexit__` runs no await before it has handed the settlement to a background task, so a cancellation
cannot skip it, and it runs once per request by construction. What is charged:

    refused, or failed before admission   nothing to settle (the store reserved nothing)
    error before the first byte           nothing (0 in, 0 out)
    completed                             the upstream's usage; without usage: our prompt count + the delivered text
    cut mid-stream / disconnected         the upstream's usage if it came, else our prompt count + delivered text
    blocked by an output guardrail        our prompt count + the text generated up to the block (upstream cut)
    client gone before the first byte     our prompt count, when the replica had taken the request (a stream)
    client gone, not streamed             the upstream's usage: the answer is read to its end and dropped

It also writes the request's access-log line (gateway/access_log.py), refusals included: an admitted request's from
its settlement task, with the tokens charged; any other's here, at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from gateway.access_log import AccessLog, Ending
from gateway.metrics import GatewayMetrics
from gateway.request.attempt import UpstreamAttempt
from gateway.request.context import Delivery, RequestContext, RequestPhase
from gateway.request.tokenizer import PromptTokenizer, estimate_tokens
from gateway.request.usage import cached_tokens, usage_tokens
from gateway.store.base import Admission, Settlement
from gateway.store.spend import cost_micro_usd

log = logging.getLogger(__name__)


class SettlingStore(Protocol):
    async def settle(self, settlement: Settlement, store: Any) -> None:
        """`store`: the one that admitted the request (Admission.store), which the settlement goes back to."""


@dataclass(frozen=True, slots=True)
class SettlementParts:
    """What settling reads and writes: built once, at start-up."""

    store: SettlingStore
    metrics: GatewayMetrics
    tokenizers: dict[str, PromptTokenizer]
    spawn: Callable[[Coroutine[Any, Any, None]], None]
    """Runs a settlement in the background; the gateway waits for those still running when it shuts down."""
    access_log: AccessLog | None = None
    """None: the gateway config's `access_log: false`."""


class Reservation:
    """`async with Reservation(parts, ctx, attempt):` around everything a request does."""

    def __init__(self, parts: SettlementParts, ctx: RequestContext, attempt: UpstreamAttempt) -> None:
        self._parts = parts
        self._ctx = ctx
        self._attempt = attempt

    async def __aenter__(self) -> RequestContext:
        return self._ctx

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        # No await in here: neither a cancellation nor an error can come between the request's end and its settlement.
        ctx, parts, access = self._ctx, self._parts, self._parts.access_log
        # Attribute reads only (it cannot fail): the ending as it is now, before the attempt lets go of its route.
        ending = access.ending(ctx, self._attempt) if access is not None else None
        if ctx.admission is not None:  # first: nothing below may keep the reservation from being settled
            parts.spawn(self._settle(ctx, ctx.admission, self._attempt.accepted, ending))
        phase, ctx.phase = ctx.phase, RequestPhase.SETTLED
        self._attempt.release()
        status = ctx.delivery.status
        if ctx.admission is not None or status:  # a client gone before its body was read gets no answer to count
            tenant_id = ctx.tenant.id if phase >= RequestPhase.IDENTIFIED else ""
            model = ctx.parsed.model if phase >= RequestPhase.AUTHED else ""
            parts.metrics.child(parts.metrics.requests, tenant_id, model, str(status or 500)).inc()
        if access is not None and ending is not None and ctx.admission is None:
            access.write(ctx, ending, 0, 0)

    async def _settle(self, ctx: RequestContext, admission: Admission, accepted: bool, ending: Ending | None) -> None:
        parts, delivery = self._parts, ctx.delivery
        usage = delivery.usage or (delivery.scanner.usage if delivery.scanner else None) or {}
        actual_in, actual_out, cached_in = 0, 0, 0
        if delivery.delivered_any:
            reported_in = usage_tokens(usage.get("prompt_tokens"))
            reported_out = usage_tokens(usage.get("completion_tokens"))
            actual_in = ctx.prompt.prompt_tokens if reported_in is None else reported_in
            actual_out = self._count_delivered(ctx) if reported_out is None else reported_out
            cached_in = min(actual_in, billed_cached_tokens(cached_tokens(usage), delivery))
        elif accepted:  # the client left before any of the answer arrived: the prompt was still taken in
            actual_in = ctx.prompt.prompt_tokens
        settlement = Settlement(
            ctx.tenant.id,
            ctx.key.digest,
            ctx.parsed.model,
            ctx.request_id,
            ctx.prompt.prompt_tokens,
            admission.reserved_out,
            actual_in,
            actual_out,
            admission.day,
            admission.month,
            ctx.lease_end_ms,
            cached_in=cached_in,
            reserved_cost_micro_usd=admission.reserved_cost_micro_usd,
            cost_micro_usd=cost_micro_usd(ctx.model.price_per_token, actual_in, cached_in, actual_out),
            tenant_created_ms=ctx.tenant.created_ms,
        )
        try:
            await parts.store.settle(settlement, admission.store)
        except Exception:
            log.exception("settlement of %s failed", ctx.request_id)
        else:
            parts.metrics.child(parts.metrics.tokens, ctx.tenant.id, "input").inc(actual_in)
            parts.metrics.child(parts.metrics.tokens, ctx.tenant.id, "output").inc(actual_out)
        if parts.access_log is not None and ending is not None:  # after the settlement: a failure here costs a line
            parts.access_log.write(ctx, ending, actual_in, actual_out)

    def _count_delivered(self, ctx: RequestContext) -> int:
        delivery = ctx.delivery
        text = delivery.completion_text
        if text is None:
            text = delivery.scanner.delivered_text() if delivery.scanner else ""
        tokenizer = self._parts.tokenizers.get(ctx.model.name)
        return estimate_tokens(text) if tokenizer is None else tokenizer.count(text)


def usage_as_billed(usage: dict[str, Any], delivery: Delivery) -> dict[str, Any] | None:
    """The usage a client is shown when a prefill replica handed the prompt over: its cached_tokens as billed
    (billed_cached_tokens), so that the answer and the bill agree; None when nothing changes (no handoff, or every
    handed token came from the prefill replica's cache)."""
    reported = cached_tokens(usage)
    billed = billed_cached_tokens(reported, delivery)
    prompt_tokens = usage_tokens(usage.get("prompt_tokens"))
    if prompt_tokens is not None:  # as settlement bills it: never more cached than the prompt
        billed = min(billed, prompt_tokens)
    if billed == reported:
        return None
    return {**usage, "prompt_tokens_details": {**usage["prompt_tokens_details"], "cached_tokens": billed}}


def billed_cached_tokens(reported: int, delivery: Delivery) -> int:
    """The prompt tokens no replica computed. A decode replica reports the KV a prefill replica handed it as cached
    (as vLLM's does), though the prefill replica computed it: those are billed as the prefill replica served them,
    from its own prefix cache or not (a 3,000-token prompt seen for the first time was billed as 2,992 cached)."""
    if delivery.handed_over_tokens <= 0:
        return reported
    return min(reported, delivery.prefill_cached_tokens + max(0, reported - delivery.handed_over_tokens))
