"""Steps 1-5 of the request path (DESIGN.md): auth, cheap pre-check, input guardrails (`prepare`), tokenize
(`tokenize`) and admission (`decide`).

Everything before the admission script is in-process; the script is the request's one Redis round trip before
routing (which the proxy may overlap with the upstream request: gateway/overlap.py). A key whose request bucket was
found empty is refused locally for up to PRECHECK_MAX_S (the "cheap pre-check"), so an over-limit key costs neither
tokenization nor more than one Redis call a second.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from gateway.asgi import header, read_body
from gateway.config import ModelConfig
from gateway.errors import ApiError, model_not_allowed, retry_after, unknown_model
from gateway.overlap import Needs
from gateway.parse import CHAT, ParsedRequest, parse_chat, parse_completion, parse_json
from gateway.prompts import Prompt, measure
from gateway.ratelimit_headers import ratelimit_headers
from gateway.rejections import rejection
from gateway.spans import stage
from gateway.store import base
from gateway.store.base import Admission, AdmitRequest, reservation
from gateway.tenants import ApiKey, Tenant

PRECHECK_MAX_S = 1.0
"""A local refusal stands at most this long before the store is asked again, so an admin change made through
another gateway instance (a raised limit) shows within it; the instance that took the change drops it at once."""
MAX_DENIED_KEYS = 100_000


@dataclass
class Ticket:
    """A request on its way through the request path. Once `admission` is set it holds a reservation that must be
    settled exactly once."""

    parsed: ParsedRequest
    raw_body: bytes
    model: ModelConfig
    key: ApiKey
    tenant: Tenant
    request_id: str
    """The gateway's unique id for this request (the store's in-flight entry, the replica's x-request-id)."""
    shown_request_id: bytes
    """The x-request-id the client sees: its own when it sent a usable one, else request_id."""
    lease_end_ms: int
    """Wall-clock ms at which the in-flight lease ends: lets a replayed settlement tell it already ran."""
    reserved_out: int
    """The output reservation as this gateway computes it (the store's own answer is admission.reserved_out)."""
    prompt: Prompt | None = None
    """Set by `tokenize`."""
    overlap_needs: Needs | None = None
    """What the overlap gate took for this request when it is sent before its admission answers."""
    admission: Admission | None = None
    """Set when the store admitted the request; None before and after a refusal."""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    settled: bool = False


async def prepare(gw, kind: str, scope, receive, request_id: str, shown_request_id: bytes) -> Ticket:
    """Steps 1-3: auth, the cheap pre-check and the input guardrails, all in-process."""
    with stage("auth"):
        key, tenant = await gw.auth.authenticate(header(scope, b"authorization"))
    raw = await read_body(receive)
    parsed = (parse_chat if kind == CHAT else parse_completion)(parse_json(raw))
    model = gw.config.models.get(parsed.model)
    if model is None:
        raise unknown_model(parsed.model)
    if not tenant.allows(parsed.model):  # the cached copy may predate an admin change: ask the store to be sure
        tenant = await gw.auth.refresh_tenant(tenant.id)
        if not tenant.allows(parsed.model):
            raise model_not_allowed(parsed.model)
    _precheck(gw, key, tenant)
    with stage("guardrails.input"):
        parsed.body = await gw.hooks.check_input(tenant, kind, parsed.body)
    return Ticket(parsed, raw, model, key, tenant, request_id, shown_request_id,
                  int((time.time() + gw.config.request_lease_s) * 1000),
                  reservation(parsed.max_tokens, parsed.completions, tenant.default_max_tokens))


async def tokenize(gw, a: Ticket) -> None:
    """Step 4: the exact prompt token count (and the ids routing hashes)."""
    started = time.perf_counter()
    with stage("tokenize"):
        a.prompt = await measure(a.parsed, a.model, gw.tokenizers.get(a.model.name))
    gw.metrics.child(gw.metrics.tokenize_seconds, a.model.name).observe(time.perf_counter() - started)


async def decide(gw, a: Ticket) -> None:
    """Step 5: the admission script. Sets a.admission and a.headers, or raises the refusal as an ApiError."""
    request = AdmitRequest(a.tenant.id, a.key.digest, a.parsed.model, a.prompt.prompt_tokens, a.parsed.max_tokens,
                           a.parsed.completions, a.request_id, gw.config.request_lease_s)
    try:
        with stage("admission"):
            admission = await gw.store.admit(request, a.tenant, a.key)
    except BaseException:
        gw.overlap.answered(a.tenant.id, a.key.digest, a.overlap_needs, None)
        raise
    gw.overlap.answered(a.tenant.id, a.key.digest, a.overlap_needs, admission)
    # A local fallback admission carries the local copy's own generation counter, not Redis': nothing to refresh
    # from while Redis is down, and the cached tenant is the freshest copy there is.
    if admission.reason != base.UNAUTHORIZED and not admission.fallback and admission.tenant_gen != a.tenant.gen:
        try:
            a.tenant = await gw.auth.refresh_tenant(a.tenant.id)
        except BaseException:
            gw.overlap.forget(a.tenant.id, a.key.digest)
            if admission.ok:  # the store took the reservation: give it back, or it leaks until the lease ends
                gw.spawn(gw.store.settle(_nothing_used(request, admission, a.lease_end_ms), admission.store))
            raise
    headers = ratelimit_headers(admission.buckets)
    if not admission.ok:
        text_headers = {k.decode(): v.decode() for k, v in headers}
        _refused(gw, a.key, a.tenant, admission, text_headers)
        error = rejection(admission, request.model, request.prompt_tokens)
        error.headers.update(text_headers)
        raise error
    headers.append((b"x-request-id", a.shown_request_id))
    a.admission, a.headers = admission, headers


def _nothing_used(request: AdmitRequest, admission, lease_end_ms: int) -> base.Settlement:
    return base.Settlement(request.tenant_id, request.digest, request.model, request.request_id,
                           request.prompt_tokens, admission.reserved_out, 0, 0, admission.day, admission.month,
                           lease_end_ms)


def _precheck(gw, key: ApiKey, tenant: Tenant) -> None:
    denied = gw.denied_until.get(key.digest)
    if denied is None:
        return
    recheck_at, until, _, headers = denied
    now = time.monotonic()
    if now >= recheck_at:
        del gw.denied_until[key.digest]
        return
    wait_s = until - now
    gw.metrics.child(gw.metrics.rejections, tenant.id, base.REQUESTS).inc()
    # The buckets as the store last reported them: the request bucket is still empty until `until`.
    raise ApiError(429, f"Rate limit reached for requests per minute (rpm). Please try again in {wait_s:.3g}s.",
                   "requests", "rate_limit_exceeded", headers={**headers, **retry_after(wait_s)})


def _refused(gw, key: ApiKey, tenant: Tenant, admission: Admission, headers: dict[str, str]) -> None:
    gw.metrics.child(gw.metrics.rejections, tenant.id, admission.reason).inc()
    if admission.reason == base.UNAUTHORIZED:
        gw.auth.forget_key(key.digest)
    elif admission.reason == base.REQUESTS and not admission.fallback:  # Redis may be back any moment
        if len(gw.denied_until) >= MAX_DENIED_KEYS:  # keys that never come back would pile up
            gw.denied_until.clear()
        now = time.monotonic()
        gw.denied_until[key.digest] = (now + min(admission.retry_after_s, PRECHECK_MAX_S),
                                       now + admission.retry_after_s, tenant.id, headers)
