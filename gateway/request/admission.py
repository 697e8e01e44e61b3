"""Steps 1-5 of the request path as one component: auth, the cheap pre-check (precheck.py), input guardrails
(`prepare`), then tokenize and the store's admission, overlapped with the upstream request when the key has ample
headroom (`admit`, overlap.py), and the input checks a policy runs alongside the upstream request (`cleared`).

Everything before the admission script is in-process; the script is the request's one Redis round trip before
routing. When the overlap gate lets a request go early, its upstream attempt opens in the background while the script
runs and nothing of its response is sent until the script admits; a refusal cancels it, which closes its connection
and so aborts the request upstream.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from starlette.types import Receive

from gateway.admin.tenants import ApiKey, Tenant
from gateway.asgi import read_body
from gateway.config import GatewayConfig
from gateway.errors import ApiError, model_not_allowed, retry_after, unknown_model
from gateway.metrics import GatewayMetrics
from gateway.request.attempt import UpstreamAttempt
from gateway.request.auth import AuthCache
from gateway.request.context import RequestContext, RequestPhase
from gateway.request.hooks import RequestHooks
from gateway.request.overlap import OverlapGate
from gateway.request.parse import (
    CHAT,
    COMPLETIONS,
    EMBEDDINGS,
    RESPONSES,
    parse_chat,
    parse_completion,
    parse_embeddings,
    parse_json,
    parse_responses,
)
from gateway.request.precheck import DeniedKeys
from gateway.request.prompts import measure
from gateway.request.ratelimit_headers import ratelimit_headers
from gateway.request.rejections import rejection
from gateway.request.spans import stage
from gateway.request.tokenizer import PromptTokenizer
from gateway.store import base
from gateway.store.base import Admission, AdmitRequest, reservation
from gateway.store.spend import worst_cost_micro_usd

_PARSERS = {CHAT: parse_chat, COMPLETIONS: parse_completion, EMBEDDINGS: parse_embeddings, RESPONSES: parse_responses}


class AdmittingStore(Protocol):
    async def admit(self, request: AdmitRequest, tenant: Tenant, key: ApiKey) -> Admission: ...


@dataclass(frozen=True, slots=True)
class AdmissionParts:
    """What admission reads and writes: built once, at start-up."""

    config: GatewayConfig
    auth: AuthCache
    store: AdmittingStore
    overlap: OverlapGate
    denied: DeniedKeys
    hooks: RequestHooks
    tokenizers: dict[str, PromptTokenizer]
    metrics: GatewayMetrics


class AdmissionControl:
    def __init__(self, parts: AdmissionParts) -> None:
        self._parts = parts

    async def prepare(self, ctx: RequestContext, authorization: bytes | None, receive: Receive) -> None:
        """Steps 1-3: auth, the cheap pre-check and the input guardrails, all in-process. Phase: AUTHED (IDENTIFIED
        once the key is known, AUTHED once the body is valid: a refusal after that counts under the tenant)."""
        p = self._parts
        with stage("auth"):
            key, tenant = await p.auth.authenticate(authorization)
        ctx.key, ctx.tenant, ctx.phase = key, tenant, RequestPhase.IDENTIFIED
        raw = await read_body(receive)
        parsed = _PARSERS[ctx.kind](parse_json(raw))
        model = p.config.models.get(parsed.model)
        if model is None:
            raise unknown_model(parsed.model)
        if not tenant.allows(parsed.model):  # the cached copy may predate an admin change: ask the store to be sure
            tenant = ctx.tenant = await p.auth.refresh_tenant(tenant.id)
            if not tenant.allows(parsed.model):
                raise model_not_allowed(parsed.model)
        ctx.parsed, ctx.raw_body, ctx.model = parsed, raw, model
        ctx.lease_end_ms = int((time.time() + p.config.request_lease_s) * 1000)
        ctx.reserved_out = reservation(parsed.max_tokens, parsed.completions, tenant.default_reservation)
        # From here an answer counts under the tenant and model: the pre-check's 429s and guardrail blocks too.
        ctx.phase = RequestPhase.AUTHED
        self._precheck(key, tenant)
        # First, on the body as the client sent it (check_input may hand back a redacted copy), and outside the
        # guardrails.input span, which ends long before this check does.
        ctx.alongside = p.hooks.check_alongside(tenant, parsed.kind, parsed.body)
        with stage("guardrails.input"):
            parsed.body = await p.hooks.check_input(tenant, parsed.kind, parsed.body)

    async def admit(self, ctx: RequestContext, attempt: UpstreamAttempt) -> None:
        """Steps 4-5: tokenize, then the admission script, with `attempt` started meanwhile when the overlap gate
        allows it. Phase: ADMITTED, or an ApiError (the refusal)."""
        p = self._parts
        await self._tokenize(ctx)
        ctx.overlap_needs = p.overlap.allows(
            ctx.tenant.id, ctx.key.digest, ctx.prompt.prompt_tokens, ctx.reserved_out, self._worst_cost(ctx)
        )
        if ctx.overlap_needs is None:
            await self._decide(ctx)
            return
        tenant = ctx.tenant
        attempt.start(ctx)
        try:
            await self._decide(ctx)
        except BaseException as exc:
            await attempt.abandon()
            if isinstance(exc, ApiError):
                p.metrics.overlap_refusals.inc()
            raise
        if ctx.tenant is not tenant:
            # An admin changed the tenant: what was sent used the old copy (its cache salt, its prefix hashes).
            await attempt.restart()
            return
        p.metrics.overlapped.inc()

    async def cleared(self, ctx: RequestContext, attempt: UpstreamAttempt) -> None:
        """Step 5b, for a request whose input checks run alongside it (hooks.check_alongside): it goes upstream now,
        if the overlap gate has not already sent it, and waits for them. A refusal cancels it there (its connection
        closed, nothing charged) and is raised; nothing of its answer has reached the client."""
        checks = ctx.alongside
        if checks is None:
            return
        if not attempt.started and not checks.done():  # one that ended already: a refusal sends nothing
            attempt.start(ctx)
        try:
            with stage("guardrails.alongside"):
                await checks
        except BaseException:
            await attempt.abandon()
            raise

    async def _tokenize(self, ctx: RequestContext) -> None:
        """Step 4: the exact prompt token count (and the ids routing hashes)."""
        p = self._parts
        started = time.perf_counter()
        with stage("tokenize"):
            ctx.prompt = await measure(ctx.parsed, ctx.model, p.tokenizers.get(ctx.model.name))
        p.metrics.child(p.metrics.tokenize_seconds, ctx.model.name).observe(time.perf_counter() - started)

    async def _decide(self, ctx: RequestContext) -> None:
        """Step 5: the admission script. Sets ctx.admission and ctx.headers, or raises the refusal as an ApiError."""
        p = self._parts
        request = AdmitRequest(
            ctx.tenant.id,
            ctx.key.digest,
            ctx.parsed.model,
            ctx.prompt.prompt_tokens,
            ctx.parsed.max_tokens,
            ctx.parsed.completions,
            ctx.request_id,
            p.config.request_lease_s,
            self._worst_cost(ctx),
        )
        try:
            with stage("admission"):
                admission = await p.store.admit(request, ctx.tenant, ctx.key)
        except BaseException:
            p.overlap.answered(ctx.tenant.id, ctx.key.digest, ctx.overlap_needs, None)
            raise
        p.overlap.answered(ctx.tenant.id, ctx.key.digest, ctx.overlap_needs, admission)
        if admission.ok:  # the store took the reservation: from here, leaving the request settles it
            ctx.admission, ctx.phase = admission, RequestPhase.ADMITTED
        # A local fallback admission carries the local copy's own generation counter, not Redis': nothing to refresh
        # from while Redis is down, and the cached tenant is the freshest copy there is.
        if admission.reason != base.UNAUTHORIZED and not admission.fallback and admission.tenant_gen != ctx.tenant.gen:
            try:
                ctx.tenant = await p.auth.refresh_tenant(ctx.tenant.id)
            except BaseException:
                p.overlap.forget(ctx.tenant.id, ctx.key.digest)
                raise
        headers = ratelimit_headers(admission.buckets)
        if not admission.ok:
            text_headers = {k.decode(): v.decode() for k, v in headers}
            self._refused(ctx.key, ctx.tenant, admission, text_headers)
            error = rejection(admission, request.model, request.prompt_tokens, ctx.tenant, ctx.key)
            error.headers.update(text_headers)
            raise error
        headers.append((b"x-request-id", ctx.shown_request_id))
        ctx.headers = headers

    @staticmethod
    def _worst_cost(ctx: RequestContext) -> int:
        """What the money budgets reserve: the model's price for the prompt and the whole output reservation."""
        return worst_cost_micro_usd(ctx.model.price_per_token, ctx.prompt.prompt_tokens, ctx.reserved_out)

    def _precheck(self, key: ApiKey, tenant: Tenant) -> None:
        p = self._parts
        now_s = time.monotonic()
        denial = p.denied.standing(key.digest, now_s)
        if denial is None:
            return
        wait_s = denial.refill_at_s - now_s
        p.metrics.child(p.metrics.rejections, tenant.id, base.REQUESTS).inc()
        # The buckets as the store last reported them: the request bucket is still empty until refill_at_s.
        raise ApiError(
            429,
            f"Rate limit reached for requests per minute (rpm): limit {denial.requests_limit}. Please try again in "
            f"{wait_s:.3g}s.",
            "requests",
            "rate_limit_exceeded",
            headers={**denial.headers, **retry_after(wait_s)},
        )

    def _refused(self, key: ApiKey, tenant: Tenant, admission: Admission, headers: dict[str, str]) -> None:
        p = self._parts
        p.metrics.child(p.metrics.rejections, tenant.id, admission.reason).inc()
        if admission.reason == base.UNAUTHORIZED:
            p.auth.forget_key(key.digest)
        elif admission.reason == base.REQUESTS and not admission.fallback:  # Redis may be back any moment
            view = admission.buckets.get(base.REQUESTS)
            p.denied.deny(key.digest, tenant.id, admission.retry_after_s, headers, view.limit if view else 0)
