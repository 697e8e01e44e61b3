"""Redis with a failure policy (docs/architecture.md, "Redis unreachable"):

- every Redis call is bounded by the socket timeout; a failure marks Redis down for `retry_interval_s`, during which
  requests do not wait on it at all; after that one request probes it again, so recovery is automatic;
- fail_open: admission runs on local in-process buckets at each limit / num_instances (the instances together
  stay near the shared limit), budgets starting from this instance's share of what Redis last said was left, and
  what it serves is recorded in Redis once it is back; fail_closed: admission answers 503;
- a settlement that cannot reach Redis waits in a bounded queue and is replayed when Redis answers again, so each
  admitted request is still settled once: a replay of one that did run (only its reply was lost) is skipped by the
  script; an admission whose reply was lost may have taken a reservation, so a void settlement returning it is
  queued too (skipped if the admission never ran);
- an error reply (a script error, a value Redis cannot take) is not an outage: that call fails alone, Redis stays
  up, and a settlement Redis rejects is dropped and logged rather than blocking the queue behind it.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gateway.admin.tenants import ApiKey, Tenant
from gateway.config import FAIL_OPEN
from gateway.errors import unavailable
from gateway.metrics import GatewayMetrics
from gateway.store.base import (
    RECORD,
    VOID,
    Admission,
    AdmitRequest,
    Settlement,
    StoreRejected,
    StoreReplyLost,
    StoreUnavailable,
)
from gateway.store.clock import now_ms, periods
from gateway.store.memory import MemoryStore
from gateway.store.redis_store import RedisStore

log = logging.getLogger(__name__)
MAX_PENDING_SETTLEMENTS = 100_000
_SCALED_LIMITS = ("rpm", "input_tpm", "output_tpm", "max_concurrent", "daily_tokens", "monthly_tokens")
_BUDGETS = ("daily_tokens", "monthly_tokens")
MAX_TRACKED_TENANTS = 100_000
T = TypeVar("T")


class ResilientStore:
    def __init__(
        self, redis: RedisStore, failure_mode: str, retry_interval_s: float, num_instances: int, metrics: GatewayMetrics
    ) -> None:
        self.primary = redis
        self.local = MemoryStore()
        self._fail_open = failure_mode == FAIL_OPEN
        self._mode = failure_mode
        self._retry_interval_s = retry_interval_s
        self._num_instances = num_instances
        self._metrics = metrics
        self._down_until = 0.0  # monotonic seconds; 0: believed up
        self._local_gens: dict[str, int] = {}  # tenant id -> gen of the copy the local store holds
        # tenant id -> (day, month, {"daily_tokens" | "monthly_tokens": tokens left}) from Redis' last answer: where
        # fail_open's local budgets start, so a tenant that spent its day does not get it again during an outage
        self._budgets_left: dict[str, tuple[str, str, dict[str, int]]] = {}
        self._budgets_seeded: set[str] = set()  # tenants whose local budgets were set from that since Redis went down
        self._pending: deque[Settlement] = deque(maxlen=MAX_PENDING_SETTLEMENTS)
        self._replay: asyncio.Task[None] | None = None
        metrics.redis_up.set(1)

    async def start(self) -> None:
        try:
            await self.primary.start()
        except StoreUnavailable as exc:
            self._mark_down(exc)

    async def close(self) -> None:
        if self._replay:
            self._replay.cancel()
        await self.primary.close()

    @property
    def redis_up(self) -> bool:
        return self._down_until == 0.0

    def _mark_down(self, exc: Exception) -> None:
        if self._down_until == 0.0:
            log.warning("redis unreachable (%s); %s for now", exc, self._mode)
            self._budgets_seeded.clear()  # a new outage: local budgets start again from Redis' last answers
        self._down_until = time.monotonic() + self._retry_interval_s
        self._metrics.redis_up.set(0)

    def _mark_up(self) -> None:
        if self._down_until != 0.0:
            log.warning("redis reachable again")
            self._down_until = 0.0
            self._metrics.redis_up.set(1)
        if self._pending and (self._replay is None or self._replay.done()):
            self._replay = asyncio.get_running_loop().create_task(self._replay_settlements())

    def _should_try(self) -> bool:
        return self._down_until == 0.0 or time.monotonic() >= self._down_until

    async def _primary(self, op: str, fn: Callable[..., Awaitable[T]], *args: object) -> T:
        """Run a read on Redis; StoreUnavailable at once while it is marked down."""
        if not self._should_try():
            raise StoreUnavailable("redis marked down")
        try:
            result = await fn(*args)
        except StoreUnavailable as exc:
            self._mark_down(exc)
            raise
        self._mark_up()
        return result

    # ---- request path -------------------------------------------------------------------------------------------
    async def get_key(self, digest: str) -> ApiKey | None:
        return await self._primary("get_key", self.primary.get_key, digest)

    async def get_tenant(self, tenant_id: str) -> Tenant | None:
        return await self._primary("get_tenant", self.primary.get_tenant, tenant_id)

    async def admit(self, request: AdmitRequest, tenant: Tenant, key: ApiKey) -> Admission:
        """`tenant` and `key` are the caller's cached copies, used only for the local buckets of fail_open."""
        try:
            admission = await self._primary("admit", self.primary.admit, request)
            admission.store = self.primary
            self._note_budgets(request.tenant_id, admission)
            return admission
        except StoreRejected:
            log.exception("redis rejected the admission of %s", request.request_id)
            raise unavailable("Rate limiting failed for this request; retry shortly.") from None
        except StoreUnavailable as exc:
            if isinstance(exc, StoreReplyLost):
                self._queue(_void_settlement(request, tenant))
            self._metrics.child(self._metrics.redis_fallbacks, self._mode, "admit").inc()
            if not self._fail_open:
                raise unavailable("Rate limiting is unavailable (Redis unreachable); retry shortly.") from None
        await self._sync_local(tenant, key)
        admission = await self.local.admit(request)
        admission.store, admission.fallback = self.local, True
        return admission

    async def settle(self, settlement: Settlement, store: object) -> None:
        if store is self.local:
            await self.local.settle(settlement)
            # Redis never saw this request: its usage and budget spend go there too, now or once it is back.
            settlement = dataclasses.replace(settlement, reserved_in=0, reserved_out=0, kind=RECORD)
        try:
            await self._primary("settle", self.primary.settle, settlement)
        except StoreRejected:
            log.exception("redis rejected the settlement of %s; dropped", settlement.request_id)
        except StoreUnavailable:
            self._metrics.child(self._metrics.redis_fallbacks, self._mode, "settle").inc()
            self._queue(settlement)

    def _queue(self, settlement: Settlement) -> None:
        settlement.replay = True
        self._pending.append(settlement)
        self._metrics.settle_pending.set(len(self._pending))

    def _note_budgets(self, tenant_id: str, admission: Admission) -> None:
        left = {name: admission.headroom[name][1] for name in _BUDGETS if name in admission.headroom}
        if left:
            if len(self._budgets_left) >= MAX_TRACKED_TENANTS:
                self._budgets_left.clear()
            self._budgets_left[tenant_id] = (admission.day, admission.month, left)

    async def _sync_local(self, tenant: Tenant, key: ApiKey) -> None:
        if self._local_gens.get(tenant.id) != tenant.gen:
            scaled = copy.deepcopy(tenant)
            for name in _SCALED_LIMITS:
                limit = getattr(scaled, name)
                if limit > 0:
                    setattr(scaled, name, max(1, -(-limit // self._num_instances)))
            await self.local.put_tenant(scaled)
            self._local_gens[tenant.id] = tenant.gen
        if tenant.id not in self._budgets_seeded:
            self._budgets_seeded.add(tenant.id)
            self._seed_budgets(tenant)
        if await self.local.get_key(key.digest) is None:
            await self.local.put_key(key)

    def _seed_budgets(self, tenant: Tenant) -> None:
        """This instance's share of what Redis last said was left of the tenant's budgets becomes what is left of
        its local ones (a budget of another day or month, or never seen, starts full)."""
        known = self._budgets_left.get(tenant.id)
        if known is None:
            return
        day, month, left = known
        now_day, now_month, _, _ = periods(now_ms())
        for name, period_key, same_period in (
            ("daily_tokens", "d:" + day, day == now_day),
            ("monthly_tokens", "m:" + month, month == now_month),
        ):
            limit = getattr(tenant, name)
            if limit > 0 and name in left and same_period:
                share = -(-limit // self._num_instances)
                self.local.set_spent(tenant.id, period_key, share - left[name] // self._num_instances)

    async def _replay_settlements(self) -> None:
        while self._pending:
            settlement = self._pending[0]
            try:
                await self.primary.settle(settlement)
            except StoreRejected:
                log.exception("redis rejected the settlement of %s; dropped", settlement.request_id)
            except StoreUnavailable as exc:
                self._mark_down(exc)
                return
            self._pending.popleft()
            self._metrics.settle_pending.set(len(self._pending))

    # ---- admin: straight to Redis (an admin change must reach every instance, so it cannot fall back) -------
    async def put_tenant(self, tenant: Tenant) -> Tenant:
        return await self.primary.put_tenant(tenant)

    async def delete_tenant(self, tenant_id: str) -> bool:
        return await self.primary.delete_tenant(tenant_id)

    async def list_tenants(self) -> list[Tenant]:
        return await self.primary.list_tenants()

    async def create_tenant(self, tenant: Tenant) -> Tenant | None:
        return await self.primary.create_tenant(tenant)

    async def update_tenant(self, tenant_id: str, changes: dict[str, object]) -> Tenant | None:
        return await self.primary.update_tenant(tenant_id, changes)

    async def put_key(self, key: ApiKey) -> None:
        await self.primary.put_key(key)

    async def update_key(self, tenant_id: str, digest: str, changes: dict[str, object]) -> ApiKey | None:
        return await self.primary.update_key(tenant_id, digest, changes)

    async def retire_key(self, tenant_id: str, digest: str, grace_s: float) -> tuple[str, ApiKey | None]:
        return await self.primary.retire_key(tenant_id, digest, grace_s)

    async def delete_key(self, tenant_id: str, digest: str) -> bool:
        return await self.primary.delete_key(tenant_id, digest)

    async def list_keys(self, tenant_id: str) -> list[ApiKey]:
        return await self.primary.list_keys(tenant_id)

    async def usage(self, tenant_id: str, days: list[str]) -> dict[str, dict[str, int]]:
        return await self.primary.usage(tenant_id, days)


def _void_settlement(request: AdmitRequest, tenant: Tenant) -> Settlement:
    """Returns what an admission whose reply was lost would have taken (its reservation and its request unit),
    without counting usage. Dates are the gateway's: near midnight UTC the refund may land on the neighbouring
    day."""
    now = now_ms()
    day, month, _, _ = periods(now)
    return Settlement(
        request.tenant_id,
        request.digest,
        request.model,
        request.request_id,
        request.prompt_tokens,
        request.reserved_out(tenant.default_max_tokens),
        0,
        0,
        day,
        month,
        lease_end_ms=now + int(request.lease_s * 1000),
        kind=VOID,
    )
