"""Which admissions may overlap the upstream request (request path step 5, docs/architecture.md).

The admission script is the request's one Redis round trip before routing (~0.15-0.25 ms on loopback, more to a
Redis on another host). When the last answers this gateway got left at least MIN_FREE_FRACTION of every limit free
after this request too (the key's buckets; the tenant's buckets, concurrency and daily and monthly budgets, shared
by all its keys), the script will all but certainly admit the request, so the gateway sends it upstream while the
script runs and holds the response back until the script answers. Should it refuse after all (other gateways drained the
buckets in between), the upstream connection is closed, which aborts the request there, and the client gets the
refusal it would have got. A key or tenant with less free, refused or admitted on fail-open local buckets last
time, whose last admission failed, or not seen for MAX_VIEW_AGE_S, is admitted first, as before: a tenant at or
over a limit never costs an upstream any work.

No burst rides on one answer: each overlapped request takes its needs out of the views at once, and until its own
answer comes they stay taken out of every newer answer too (Redis' answer for one request does not count the
others this gateway has sent but Redis has not run yet).
"""

from __future__ import annotations

import time

from gateway.store import base
from gateway.store.base import Admission

MIN_FREE_FRACTION = 0.25
MAX_VIEW_AGE_S = 1.0
MAX_VIEWS = 100_000

Needs = tuple[dict[str, int], dict[str, int]]
"""What one overlapped request takes: (key-scoped buckets, tenant-scoped headroom)."""


class _Scope:
    """Views of one kind (per key, or per tenant): name -> [limit, left], and what overlapped requests still hold."""

    def __init__(self) -> None:
        self.views: dict[str, tuple[float, dict[str, list[int]]]] = {}
        self.pending: dict[str, dict[str, int]] = {}

    def fresh(self, owner: str, now_s: float) -> dict[str, list[int]] | None:
        entry = self.views.get(owner)
        if entry is None:
            return None
        if now_s - entry[0] > MAX_VIEW_AGE_S:
            del self.views[owner]
            return None
        return entry[1]

    def take(self, owner: str, view: dict[str, list[int]], needs: dict[str, int]) -> None:
        held = self.pending.setdefault(owner, {})
        for name, need in needs.items():
            if name in view:
                view[name][1] -= need
            held[name] = held.get(name, 0) + need

    def give_back(self, owner: str, needs: dict[str, int]) -> None:
        held = self.pending.get(owner)
        if held is None:
            return
        for name, need in needs.items():
            held[name] = held.get(name, 0) - need
        if not any(held.values()):
            del self.pending[owner]

    def replace(self, owner: str, limits: dict[str, tuple[int, int]], now_s: float) -> None:
        if len(self.views) >= MAX_VIEWS:
            self.views.clear()
        held = self.pending.get(owner, {})
        self.views[owner] = (now_s, {name: [limit, left - held.get(name, 0)] for name, (limit, left) in limits.items()})


class OverlapGate:
    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._keys = _Scope()  # key digest: requests, input and output token buckets (the tighter of tenant and key)
        self._tenants = _Scope()  # tenant id: base.HEADROOM (its own buckets too: its keys share them)

    def allows(
        self, tenant_id: str, digest: str, prompt_tokens: int, reserved_out: int, reserved_cost_micro_usd: int = 0
    ) -> Needs | None:
        """The request's needs when it may be sent before its admission answers (hand them to `answered`), else
        None. `reserved_cost_micro_usd`: what it takes from the tenant's money budgets."""
        if not self.enabled:
            return None
        now_s = time.monotonic()
        key_view, tenant_view = self._keys.fresh(digest, now_s), self._tenants.fresh(tenant_id, now_s)
        if key_view is None or tenant_view is None:
            return None
        total = prompt_tokens + reserved_out
        buckets = {base.REQUESTS: 1, base.INPUT_TOKENS: prompt_tokens, base.OUTPUT_TOKENS: reserved_out}
        cost = reserved_cost_micro_usd
        tenant_needs = {"concurrency": 1, "daily_tokens": total, "monthly_tokens": total, **buckets}
        needs = (buckets, {**tenant_needs, "daily_micro_usd": cost, "monthly_micro_usd": cost})  # base.HEADROOM
        for view, scope_needs in zip((key_view, tenant_view), needs):
            for name, (limit, left) in view.items():
                if left - scope_needs[name] < limit * MIN_FREE_FRACTION:
                    return None
        self._keys.take(digest, key_view, needs[0])
        self._tenants.take(tenant_id, tenant_view, needs[1])
        return needs

    def answered(self, tenant_id: str, digest: str, needs: Needs | None, admission: Admission | None) -> None:
        """The admission of a request ended: `admission` is the store's answer, None when it failed; `needs` what
        `allows` took for it, None when it was admitted first."""
        if not self.enabled:
            return
        if needs is not None:
            self._keys.give_back(digest, needs[0])
            self._tenants.give_back(tenant_id, needs[1])
        if admission is None or not admission.ok or admission.fallback:
            self.forget(tenant_id, digest)
            return
        now_s = time.monotonic()
        self._keys.replace(digest, {name: (v.limit, v.remaining) for name, v in admission.buckets.items()}, now_s)
        self._tenants.replace(tenant_id, admission.headroom, now_s)

    def forget_tenant(self, tenant_id: str) -> None:
        """Admit the tenant's requests first until the store has answered for it again (an admin change)."""
        self._tenants.views.pop(tenant_id, None)

    def forget(self, tenant_id: str, digest: str) -> None:
        """Admit this key first until the store has answered for it again."""
        self._keys.views.pop(digest, None)
        self._tenants.views.pop(tenant_id, None)
