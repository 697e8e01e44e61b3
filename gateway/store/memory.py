"""The in-process store: Store semantics (base.py) without Redis, for a single gateway instance, and the local
buckets a gateway falls back to when Redis is unreachable in fail_open mode.

Single-threaded asyncio makes every method atomic: none awaits in the middle of its read-modify-write.
"""

from __future__ import annotations

import copy
import math
from collections import Counter, defaultdict
from collections.abc import Callable

from gateway.admin.tenants import ApiKey, Tenant, key_id_of, tenant_field_changes
from gateway.store import base
from gateway.store.base import Admission, AdmitRequest, BucketView, Settlement
from gateway.store.clock import now_ms, periods, refill, reset_ms
from gateway.store.spend import micro_usd


class MemoryStore:
    def __init__(self, clock_ms: Callable[[], int] = now_ms) -> None:
        self._clock_ms = clock_ms
        self._tenants: dict[str, Tenant] = {}
        self._keys: dict[str, ApiKey] = {}  # digest -> key
        self._buckets: dict[tuple[str, str], list[float]] = {}  # (scope, bucket) -> [level, t_ms]
        self._inflight: dict[str, dict[str, int]] = defaultdict(dict)  # tenant -> request id -> lease end ms
        # tenant -> {"d:<day>" | "m:<month>": tokens, "cd:<day>" | "cm:<month>": micro-dollars}
        self._spent: dict[str, Counter[str]] = defaultdict(Counter)
        self._usage: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)  # (tenant, day) -> fields

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    # ---- request path -------------------------------------------------------------------------------------------
    async def get_key(self, digest: str) -> ApiKey | None:
        key = self._keys.get(digest)
        return copy.copy(key) if key else None

    async def get_tenant(self, tenant_id: str) -> Tenant | None:
        tenant = self._tenants.get(tenant_id)
        return copy.deepcopy(tenant) if tenant else None

    async def admit(self, request: AdmitRequest) -> Admission:
        tenant = self._tenants.get(request.tenant_id)
        key = self._keys.get(request.digest)
        now = self._clock_ms()
        if tenant is None or key is None or key.tenant_id != tenant.id or key.revoked:
            return Admission(base.UNAUTHORIZED)
        if key.expires_at > 0 and key.expires_at * 1000 <= now:
            return Admission(base.UNAUTHORIZED)
        if not tenant.allows(request.model):
            return Admission(base.MODEL_NOT_ALLOWED, tenant_gen=tenant.gen)
        reserve = request.reserved_out(tenant.default_reservation)
        day, month, to_next_day_ms, to_next_month_ms = periods(now)
        denied = Admission("", tenant_gen=tenant.gen, reserved_out=reserve, day=day, month=month)
        cost = denied.reserved_cost_micro_usd = request.reserved_cost_micro_usd

        needs = (1, request.prompt_tokens, reserve)
        specs = [
            (tenant.id, name, getattr(tenant, limit), need)
            for name, limit, need in zip(base.BUCKETS, ("rpm", "input_tpm", "output_tpm"), needs)
        ]
        specs += [
            (key.digest, name, getattr(key, limit), need)
            for name, limit, need in zip(base.BUCKETS, ("rpm", "input_tpm", "output_tpm"), needs)
        ]
        levels: list[float | None] = []
        retry_ms = 0
        for scope, name, limit, need in specs:
            if limit <= 0:
                levels.append(None)
                continue
            state = self._buckets.get((scope, name))
            level = float(limit) if state is None else refill(state[0], int(state[1]), now, limit)
            levels.append(level)
            if need > level:
                wait_ms = int(-(-(need - level) * 60_000 // limit))
                if wait_ms > retry_ms or not denied.reason:
                    denied.reason = name + (base.TOO_LARGE if need > limit else "")
                    retry_ms = max(retry_ms, wait_ms)
        # Concurrency and budgets outrank the buckets as the reason; the buckets were read first so that refusals
        # report them in the rate-limit headers too.
        inflight = self._inflight[tenant.id]
        for request_id in [r for r, end in inflight.items() if end <= now]:
            del inflight[request_id]
        total = request.prompt_tokens + reserve
        spent = self._spent[tenant.id]
        if tenant.max_concurrent > 0 and len(inflight) >= tenant.max_concurrent:
            denied.reason, retry_ms = base.CONCURRENCY, 1000
        elif tenant.daily_tokens > 0 and spent["d:" + day] + total > tenant.daily_tokens:
            denied.reason, retry_ms = base.DAILY_BUDGET, to_next_day_ms
        elif tenant.monthly_tokens > 0 and spent["m:" + month] + total > tenant.monthly_tokens:
            denied.reason, retry_ms = base.MONTHLY_BUDGET, to_next_month_ms
        elif tenant.daily_budget_usd > 0 and spent["cd:" + day] + cost > micro_usd(tenant.daily_budget_usd):
            denied.reason, retry_ms = base.DAILY_BUDGET_USD, to_next_day_ms
        elif tenant.monthly_budget_usd > 0 and spent["cm:" + month] + cost > micro_usd(tenant.monthly_budget_usd):
            denied.reason, retry_ms = base.MONTHLY_BUDGET_USD, to_next_month_ms
        if denied.reason:
            denied.retry_after_s = retry_ms / 1000
            denied.buckets = _views(specs, levels, taken=False)
            denied.headroom = _headroom(tenant, len(inflight), spent, day, month, levels[:3])
            return denied

        for (scope, name, _limit, need), taken_from in zip(specs, levels):
            if taken_from is not None:
                self._buckets[(scope, name)] = [taken_from - need, now]
        inflight[request.request_id] = now + int(request.lease_s * 1000)
        spent["d:" + day] += total
        spent["m:" + month] += total
        if cost > 0:
            spent["cd:" + day] += cost
            spent["cm:" + month] += cost
        denied.buckets = _views(specs, levels, taken=True)
        tenant_levels = [None if level is None else level - need for level, need in zip(levels[:3], needs)]
        denied.headroom = _headroom(tenant, len(inflight), spent, day, month, tenant_levels)
        return denied  # reason "" = admitted

    async def settle(self, s: Settlement) -> None:
        tenant = self._tenants.get(s.tenant_id)
        if s.tenant_created_ms and (tenant is None or tenant.created_ms != s.tenant_created_ms):
            # As settle.lua: its tenant was deleted (perhaps created again under the same id, another tenant) while
            # it ran; its refund would put the new one's spend below zero, its usage would land on it.
            return
        spent = self._spent[s.tenant_id]
        if s.kind == base.RECORD:  # see settle.lua: usage and budget spend only (nothing resends to this store)
            spent["d:" + s.day] += s.actual_in + s.actual_out
            spent["m:" + s.month] += s.actual_in + s.actual_out
            _spend(spent, s, s.cost_micro_usd)
            _count_usage(self._usage[(s.tenant_id, s.day)], s)
            return
        self._inflight[s.tenant_id].pop(s.request_id, None)
        key = self._keys.get(s.digest)
        now = self._clock_ms()
        refund_in, refund_out = s.reserved_in - s.actual_in, s.reserved_out - s.actual_out
        for scope, holder in ((s.tenant_id, tenant), (s.digest, key)):
            if holder is None:
                continue
            self._adjust(scope, base.INPUT_TOKENS, holder.input_tpm, refund_in, now)
            self._adjust(scope, base.OUTPUT_TOKENS, holder.output_tpm, refund_out, now)
            if s.kind == base.VOID:  # the request unit goes back too
                self._adjust(scope, base.REQUESTS, holder.rpm, 1, now)
        spent["d:" + s.day] -= refund_in + refund_out
        spent["m:" + s.month] -= refund_in + refund_out
        _spend(spent, s, s.cost_micro_usd - s.reserved_cost_micro_usd)
        if s.kind == base.FINAL:
            _count_usage(self._usage[(s.tenant_id, s.day)], s)

    def set_spent(self, tenant_id: str, period_key: str, tokens: int) -> None:
        """Set a budget counter ("d:<day>" / "m:<month>" tokens, "cd:" / "cm:" micro-dollars): fail_open starts its
        local budgets from Redis' view."""
        self._spent[tenant_id][period_key] = tokens

    def _adjust(self, scope: str, name: str, limit: int, delta: int, now: int) -> None:
        if limit <= 0 or delta == 0:
            return
        state = self._buckets.get((scope, name))
        level = float(limit) if state is None else refill(state[0], int(state[1]), now, limit)
        self._buckets[(scope, name)] = [max(-limit, min(limit, level + delta)), now]

    # ---- admin --------------------------------------------------------------------------------------------------
    async def put_tenant(self, tenant: Tenant) -> Tenant:
        old = self._tenants.get(tenant.id)
        tenant = copy.deepcopy(tenant)
        tenant.gen = (old.gen if old else 0) + 1
        # kept across updates; a copy of a Redis record (fail-open state) takes Redis' stamp, which the settlements
        # of the requests it admits carry (a record from before the stamps gets one in Redis on its next write)
        tenant.created_ms = tenant.created_ms or (old.created_ms if old else now_ms())
        self._tenants[tenant.id] = tenant
        return copy.deepcopy(tenant)

    async def delete_tenant(self, tenant_id: str) -> bool:
        if self._tenants.pop(tenant_id, None) is None:
            return False
        # Everything scoped to the tenant goes, as the Redis store's delete of its key prefix does: a tenant created
        # again under the same id is a new one, with full buckets and no usage.
        digests = {d for d, k in self._keys.items() if k.tenant_id == tenant_id}
        for digest in digests:
            del self._keys[digest]
        scopes = digests | {tenant_id}
        for scope_and_name in [b for b in self._buckets if b[0] in scopes]:
            del self._buckets[scope_and_name]
        for tenant_and_day in [u for u in self._usage if u[0] == tenant_id]:
            del self._usage[tenant_and_day]
        self._inflight.pop(tenant_id, None)
        self._spent.pop(tenant_id, None)
        return True

    async def list_tenants(self) -> list[Tenant]:
        return [copy.deepcopy(t) for t in sorted(self._tenants.values(), key=lambda t: t.id)]

    async def create_tenant(self, tenant: Tenant) -> Tenant | None:
        if tenant.id in self._tenants:
            return None
        return await self.put_tenant(tenant)

    async def update_tenant(self, tenant_id: str, changes: dict[str, object]) -> Tenant | None:
        tenant = self._tenants.get(tenant_id)
        if tenant is None:
            return None
        for name, value in tenant_field_changes(changes).items():
            setattr(tenant, name, copy.deepcopy(value))
        tenant.gen += 1
        return copy.deepcopy(tenant)

    async def put_key(self, key: ApiKey) -> None:
        self._keys[key.digest] = copy.copy(key)

    def _tenant_key(self, tenant_id: str, digest: str) -> ApiKey | None:
        key = self._keys.get(digest)
        return key if key is not None and key.tenant_id == tenant_id else None

    async def update_key(self, tenant_id: str, digest: str, changes: dict[str, object]) -> ApiKey | None:
        key = self._tenant_key(tenant_id, digest)
        if key is None:
            return None
        for name, value in changes.items():
            setattr(key, name, value)
        return copy.copy(key)

    async def retire_key(self, tenant_id: str, digest: str, grace_s: float) -> tuple[str, ApiKey | None]:
        key = self._tenant_key(tenant_id, digest)
        if key is None:
            return base.KEY_MISSING, None
        before = copy.copy(key)
        now_s = self._clock_ms() / 1000
        if key.revoked:
            return base.KEY_REVOKED, before
        if 0 < key.expires_at <= now_s:
            return base.KEY_EXPIRED, before
        if grace_s > 0:
            key.expires_at = now_s + grace_s if key.expires_at == 0 else min(key.expires_at, now_s + grace_s)
        else:
            key.revoked = True
        return base.RETIRED, before

    async def delete_key(self, tenant_id: str, digest: str) -> bool:
        if self._tenant_key(tenant_id, digest) is None:
            return False
        del self._keys[digest]
        for name in base.BUCKETS:
            self._buckets.pop((digest, name), None)
        return True

    async def list_keys(self, tenant_id: str) -> list[ApiKey]:
        keys = [copy.copy(k) for k in self._keys.values() if k.tenant_id == tenant_id]
        return sorted(keys, key=lambda k: k.created_at)

    async def usage(self, tenant_id: str, days: list[str]) -> dict[str, dict[str, int]]:
        return {day: dict(self._usage[(tenant_id, day)]) for day in days if (tenant_id, day) in self._usage}


def _spend(spent: Counter[str], s: Settlement, delta: int) -> None:
    """The money budgets' spend (micro-dollars): `delta` more for the admission's day and month."""
    if delta:
        spent["cd:" + s.day] += delta
        spent["cm:" + s.month] += delta


def _count_usage(counter: Counter[str], s: Settlement) -> None:
    key_id = key_id_of(s.digest)
    for prefix in ("", f"model:{s.model}:", f"key:{key_id}:"):
        counter[prefix + "requests"] += 1
        counter[prefix + "input_tokens"] += s.actual_in
        counter[prefix + "output_tokens"] += s.actual_out
        if s.cached_in > 0:  # only where not zero, as settle.lua writes them
            counter[prefix + "cached_input_tokens"] += s.cached_in
        if s.cost_micro_usd > 0:
            counter[prefix + "cost_micro_usd"] += s.cost_micro_usd


def _views(specs: list[tuple[str, str, int, int]], levels: list[float | None], taken: bool) -> dict[str, BucketView]:
    """Per bucket kind, the tighter of tenant and key: smallest limit, least remaining, latest reset."""
    views: dict[str, BucketView] = {}
    for (_scope, name, limit, need), level in zip(specs, levels):
        if level is None:
            continue
        after = level - need if taken else level
        view = BucketView(limit, max(0, int(after)), reset_ms(after, limit) / 1000)
        old = views.get(name)
        if old is None:
            views[name] = view
        else:
            views[name] = BucketView(
                min(old.limit, limit), min(old.remaining, view.remaining), max(old.reset_s, view.reset_s)
            )
    return views


def _headroom(
    tenant: Tenant, running: int, spent: Counter[str], day: str, month: str, bucket_levels: list[float | None]
) -> dict[str, tuple[int, int]]:
    """What is left of the tenant-wide limits it has (admit.lua reports the same): concurrency, budgets, and the
    levels of the tenant's own buckets (None where it has no such limit)."""
    pairs = [
        ("concurrency", tenant.max_concurrent, running),
        ("daily_tokens", tenant.daily_tokens, spent["d:" + day]),
        ("monthly_tokens", tenant.monthly_tokens, spent["m:" + month]),
        ("daily_micro_usd", micro_usd(tenant.daily_budget_usd), spent["cd:" + day]),
        ("monthly_micro_usd", micro_usd(tenant.monthly_budget_usd), spent["cm:" + month]),
    ]
    out: dict[str, tuple[int, int]] = {name: (limit, limit - used) for name, limit, used in pairs if limit > 0}
    for name, limit_name, level in zip(base.BUCKETS, ("rpm", "input_tpm", "output_tpm"), bucket_levels):
        if level is not None:
            out[name] = (getattr(tenant, limit_name), math.floor(level))
    return out
