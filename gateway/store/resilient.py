"""Redis with a failure policy (docs/architecture.md, "Redis unreachable"):

- every Redis call is bounded by the socket timeout; a failure marks Redis down for `retry_interval_s`, during which
  requests do not wait on it at all; after that one request probes it again, so recovery is automatic;
- fail_open: admission runs on local in-process buckets at each limit / num_instances (the instances together
  stay near the shared limit), budgets starting from this instance's share of what Redis last said was left, and
  what it serves is recorded in Redis once it is back; fail_closed: admission answers 503;
- a settlement that cannot reach Redis waits in a bounded queue, retried every `retry_interval_s` until Redis
  takes it (no request needs to come by), so each admitted request is still settled once: a replay of one that did
  run (only its reply was lost) is skipped by the script; an admission whose reply was lost may have taken a
  reservation, so a void settlement returning it is queued too (skipped if the admission never ran). A tenant's
  queued settlements are replayed before its next admission, so that admission never meets concurrency slots and
  reservations its own finished requests still hold;
- an error reply that means "not now" (LOADING after a restart, BUSY, READONLY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN:
  resp.OUTAGE_REPLIES) is an outage like a lost connection; any other error reply (a script error, a value Redis
  cannot take) is not: that call fails alone, Redis stays up, and a settlement Redis rejects is dropped and logged
  rather than blocking the queue behind it;
- a call that found every pooled connection busy (redis_pool.PoolExhausted) fails alone too: that is this
  gateway's overload, not Redis being down;
- at shutdown the queue gets one last try (CLOSE_FLUSH_TIMEOUT_S); what Redis still cannot take is logged, one
  error line per tenant with the usage it held, so an operator can account for it (the concurrency slots and
  reservations those requests hold in Redis lapse with their leases);
- each tenant's fail-open state (buckets, concurrency, budgets) lives in a store of its own, dropped with the
  tenant, so a tenant deleted and created again with the same id starts clean, without the old one's queued usage;
  on the other gateways the new tenant's `created_ms` tells it apart (their old state is dropped at its first
  admission there, and settle.lua drops any settlement of the old one wherever it was queued).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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
from gateway.store.leases import LeaseHeartbeat
from gateway.store.memory import MemoryStore
from gateway.store.redis_pool import PoolExhausted
from gateway.store.redis_store import RedisStore
from gateway.store.spend import micro_usd

log = logging.getLogger(__name__)
MAX_PENDING_SETTLEMENTS = 100_000
_SCALED_LIMITS = ("rpm", "input_tpm", "output_tpm", "max_concurrent", "daily_tokens", "monthly_tokens")
_SCALED_USD = ("daily_budget_usd", "monthly_budget_usd")
_BUDGETS = ("daily_tokens", "monthly_tokens", "daily_micro_usd", "monthly_micro_usd")
"""Admission headroom entries fail_open's local budgets start from: (tenant field, headroom name, spent-counter
prefix in MemoryStore, whether the field is in USD)."""
_BUDGET_SEEDS = (
    ("daily_tokens", "daily_tokens", "d:", False),
    ("monthly_tokens", "monthly_tokens", "m:", False),
    ("daily_budget_usd", "daily_micro_usd", "cd:", True),
    ("monthly_budget_usd", "monthly_micro_usd", "cm:", True),
)
MAX_TRACKED_TENANTS = 100_000
REPLAY_BATCH = 256
CLOSE_FLUSH_TIMEOUT_S = 3.0
T = TypeVar("T")


@dataclass
class _LocalTenant:
    """One tenant's fail-open state on this instance."""

    store: MemoryStore
    created_ms: int
    """Tenant.created_ms of the tenant this state is for: another value is another tenant under the same id."""
    gen: int = -1
    """The tenant generation whose limits `store` holds (-1: none yet)."""


class ResilientStore:
    def __init__(
        self, redis: RedisStore, failure_mode: str, retry_interval_s: float, num_instances: int, metrics: GatewayMetrics
    ) -> None:
        self.primary = redis
        self._fail_open = failure_mode == FAIL_OPEN
        self._mode = failure_mode
        self._retry_interval_s = retry_interval_s
        self._num_instances = num_instances
        self._metrics = metrics
        self._down_until = 0.0  # monotonic seconds; 0: believed up
        self._locals: dict[str, _LocalTenant] = {}  # tenant id -> its fail-open store
        # tenant id -> (day, month, {"daily_tokens" | "monthly_tokens": tokens left}) from Redis' last answer: where
        # fail_open's local budgets start, so a tenant that spent its day does not get it again during an outage
        self._budgets_left: dict[str, tuple[str, str, dict[str, int]]] = {}
        self._budgets_seeded: set[str] = set()  # tenants whose local budgets were set from that since Redis went down
        self._pending: dict[str, list[Settlement]] = {}  # tenant id -> its settlements waiting for Redis
        self._pending_count = 0
        self._replays: dict[str, asyncio.Task[None]] = {}  # tenant id -> the replay of its queue now running
        self._replaying: dict[str, list[Settlement]] = {}  # tenant id -> the batch that replay is sending
        self._retrier: asyncio.Task[None] | None = None
        self._leases = LeaseHeartbeat(redis.heartbeat, redis.heartbeat_s)
        metrics.redis_up(True)

    async def start(self) -> None:
        try:
            await self.primary.start()
        except StoreUnavailable as exc:
            self._mark_down(exc)

    async def close(self, flush_timeout_s: float = CLOSE_FLUSH_TIMEOUT_S) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(flush_timeout_s):
                await self._flush()
        self._leases.close()
        for task in [self._retrier, *self._replays.values()]:
            if task is not None:
                task.cancel()
        self._log_unsettled()
        await self.primary.close()

    async def _flush(self) -> None:
        """One more try for every queued settlement (Redis may be back), then wait for the replays running."""
        for tenant_id in list(self._pending):
            await self._replay_tenant(tenant_id)
            if not self.redis_up:
                return
        await asyncio.gather(*[asyncio.shield(t) for t in self._replays.values()], return_exceptions=True)

    def _log_unsettled(self) -> None:
        unsettled: dict[str, list[Settlement]] = {}
        for source in (self._pending, self._replaying):
            for tenant_id, batch in source.items():
                unsettled.setdefault(tenant_id, []).extend(batch)
        for tenant_id, batch in sorted(unsettled.items()):
            log.error(
                "shutdown with redis unreachable: %d settlements of tenant %s not recorded "
                "(input_tokens=%d output_tokens=%d cost_micro_usd=%d request_ids=%s)",
                len(batch),
                tenant_id,
                sum(s.actual_in for s in batch),
                sum(s.actual_out for s in batch),
                sum(s.cost_micro_usd for s in batch),
                ",".join(s.request_id for s in batch[:20]) + (",..." if len(batch) > 20 else ""),
            )

    @property
    def redis_up(self) -> bool:
        return self._down_until == 0.0

    def _mark_down(self, exc: Exception) -> None:
        if self._down_until == 0.0:
            log.warning("redis unreachable (%s); %s for now", exc, self._mode)
            self._budgets_seeded.clear()  # a new outage: local budgets start again from Redis' last answers
        self._down_until = time.monotonic() + self._retry_interval_s
        self._metrics.redis_up(False)

    def _mark_up(self) -> None:
        if self._down_until != 0.0:
            log.warning("redis reachable again")
            self._down_until = 0.0
            self._metrics.redis_up(True)

    def _should_try(self) -> bool:
        return self._down_until == 0.0 or time.monotonic() >= self._down_until

    async def _primary(self, op: str, fn: Callable[..., Awaitable[T]], *args: object) -> T:
        """Run a read on Redis; StoreUnavailable at once while it is marked down."""
        if not self._should_try():
            raise StoreUnavailable("redis marked down")
        try:
            result = await fn(*args)
        except PoolExhausted:
            raise  # this call waited too long for a connection of this gateway's own: Redis is not down
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
        queued = request.tenant_id in self._pending or request.tenant_id in self._replays
        if queued and self._should_try():  # Redis may be back: its finished requests' slots go back first
            await self._replay_tenant(request.tenant_id)
        try:
            admission = await self._primary("admit", self.primary.admit, request)
            admission.store = self.primary
            if admission.ok:
                self._leases.held(request.tenant_id, request.request_id)
            self._note_budgets(request.tenant_id, admission)
            return admission
        except StoreRejected:
            log.exception("redis rejected the admission of %s", request.request_id)
            raise unavailable("Rate limiting failed for this request; retry shortly.") from None
        except StoreUnavailable as exc:
            if isinstance(exc, StoreReplyLost):
                self._queue(_void_settlement(request, tenant), sent=True)
            self._metrics.child(self._metrics.redis_fallbacks, self._mode, "admit").inc()
            if not self._fail_open:
                raise unavailable("Rate limiting is unavailable (Redis unreachable); retry shortly.") from None
        local = await self._sync_local(tenant, key)
        admission = await local.admit(request)
        admission.store, admission.fallback = local, True
        return admission

    async def settle(self, settlement: Settlement, store: object) -> None:
        if isinstance(store, MemoryStore):  # admitted on a tenant's fail-open store
            await store.settle(settlement)
            # Redis never saw this request: its usage and budget spend go there too, now or once it is back.
            settlement = dataclasses.replace(settlement, reserved_in=0, reserved_out=0, kind=RECORD)
        else:
            self._leases.released(settlement.tenant_id, settlement.request_id)
        try:
            await self._primary("settle", self.primary.settle, settlement)
        except StoreRejected:
            log.exception("redis rejected the settlement of %s; dropped", settlement.request_id)
        except StoreUnavailable as exc:
            self._metrics.child(self._metrics.redis_fallbacks, self._mode, "settle").inc()
            self._queue(settlement, sent=isinstance(exc, StoreReplyLost))

    def _queue(self, settlement: Settlement, sent: bool) -> None:
        """`sent`: Redis may have run it (its reply was lost), so its replay must be skipped if it did. One that
        never ran (not sent, refused with LOADING ...) is applied as it is, even where its lease is already gone
        (a restart that lost it, or a dead owner's leases reaped: see admit.lua)."""
        settlement.replay = settlement.replay or sent
        if self._pending_count >= MAX_PENDING_SETTLEMENTS:
            log.error("settlement queue full (%d): %s dropped", self._pending_count, settlement.request_id)
            return
        self._pending.setdefault(settlement.tenant_id, []).append(settlement)
        self._pending_count += 1
        self._metrics.settle_pending.set(self._pending_count)
        self._ensure_retrier()

    def _note_budgets(self, tenant_id: str, admission: Admission) -> None:
        left = {name: admission.headroom[name][1] for name in _BUDGETS if name in admission.headroom}
        if left:
            if len(self._budgets_left) >= MAX_TRACKED_TENANTS:
                self._budgets_left.clear()
            self._budgets_left[tenant_id] = (admission.day, admission.month, left)

    async def _sync_local(self, tenant: Tenant, key: ApiKey) -> MemoryStore:
        """The tenant's fail-open store, with its limits scaled to this instance's share and the key in it."""
        local = self._locals.get(tenant.id)
        if local is not None and local.created_ms != tenant.created_ms:
            if local.created_ms:
                # Deleted and created again (through another gateway): nothing of the old tenant carries over.
                self._forget_tenant(tenant.id, keep_created_ms=tenant.created_ms)
                local = None
            else:  # a record from before created_ms, stamped since (a seed's put_tenant): the same tenant
                local.created_ms = tenant.created_ms
        if local is None:
            if len(self._locals) >= MAX_TRACKED_TENANTS:
                self._locals.clear()
            local = self._locals[tenant.id] = _LocalTenant(MemoryStore(), tenant.created_ms)
        if local.gen != tenant.gen:
            scaled = copy.deepcopy(tenant)
            for name in _SCALED_LIMITS:
                limit = getattr(scaled, name)
                if limit > 0:
                    setattr(scaled, name, max(1, -(-limit // self._num_instances)))
            for name in _SCALED_USD:  # money budgets are shared out like token budgets
                setattr(scaled, name, getattr(scaled, name) / self._num_instances)
            await local.store.put_tenant(scaled)
            local.gen = tenant.gen
        if tenant.id not in self._budgets_seeded:
            self._budgets_seeded.add(tenant.id)
            self._seed_budgets(tenant, local.store)
        if await local.store.get_key(key.digest) is None:
            await local.store.put_key(key)
        return local.store

    def _seed_budgets(self, tenant: Tenant, local: MemoryStore) -> None:
        """This instance's share of what Redis last said was left of the tenant's budgets becomes what is left of
        its local ones (a budget of another day or month, or never seen, starts full)."""
        known = self._budgets_left.get(tenant.id)
        if known is None:
            return
        day, month, left = known
        now_day, now_month, _, _ = periods(now_ms())
        for field, headroom, prefix, in_usd in _BUDGET_SEEDS:
            daily = prefix.endswith("d:")
            if (day if daily else month) != (now_day if daily else now_month):
                continue  # a budget of another day or month starts full
            limit = micro_usd(getattr(tenant, field)) if in_usd else getattr(tenant, field)
            if limit > 0 and headroom in left:
                share = -(-limit // self._num_instances)
                local.set_spent(
                    tenant.id, prefix + (day if daily else month), share - left[headroom] // self._num_instances
                )

    # ---- the settlement queue -----------------------------------------------------------------------------------
    def _ensure_retrier(self) -> None:
        if self._retrier is None or self._retrier.done():
            self._retrier = asyncio.get_running_loop().create_task(self._retry_replays())

    async def _retry_replays(self) -> None:
        """Until the queue is empty: replay it whenever Redis may be back (at the end of each retry interval), so a
        recovery is noticed without waiting for traffic and leases never outlive their requests for long."""
        while self._pending:
            await asyncio.sleep(max(self._down_until - time.monotonic(), 0.0) if self._down_until else 0.0)
            for tenant_id in list(self._pending):
                await self._replay_tenant(tenant_id)
                if not self.redis_up:
                    break
            if self._pending and self.redis_up:  # kept for a reason other than an outage: do not spin on it
                await asyncio.sleep(self._retry_interval_s)

    async def _replay_tenant(self, tenant_id: str) -> None:
        """Replay one tenant's queue; callers at the same time (its next admission, the retry loop) share it."""
        task = self._replays.get(tenant_id)
        if task is None or task.done():
            batch = self._pending.pop(tenant_id, None)
            if not batch:
                return
            self._pending_count -= len(batch)
            self._replaying[tenant_id] = batch
            task = asyncio.get_running_loop().create_task(self._send(tenant_id, batch))
            self._replays[tenant_id] = task
            task.add_done_callback(self._replay_done(tenant_id))
        await asyncio.shield(task)

    def _replay_done(self, tenant_id: str) -> Callable[[asyncio.Task[None]], None]:
        def forget(task: asyncio.Task[None]) -> None:
            if self._replays.get(tenant_id) is task:
                del self._replays[tenant_id]

        return forget

    async def _send(self, tenant_id: str, batch: list[Settlement]) -> None:
        """Settle each in Redis, REPLAY_BATCH at a time (they pipeline on one connection, each batch well within the
        socket timeout); what Redis could not take yet goes back to the front of the tenant's queue."""
        keep: list[Settlement] = []
        for start in range(0, len(batch), REPLAY_BATCH):
            chunk = batch[start : start + REPLAY_BATCH]
            if keep:  # Redis failed an earlier batch: the rest waits with it
                keep += chunk
                continue
            results = await asyncio.gather(*(self.primary.settle(s) for s in chunk), return_exceptions=True)
            for settlement, result in zip(chunk, results, strict=True):
                if isinstance(result, StoreRejected):
                    log.error("redis rejected the settlement of %s; dropped (%s)", settlement.request_id, result)
                elif isinstance(result, StoreUnavailable):
                    self._mark_down(result)
                    settlement.replay = settlement.replay or isinstance(result, StoreReplyLost)
                    keep.append(settlement)
                elif isinstance(result, BaseException):
                    log.error("settlement %s not replayed: %r", settlement.request_id, result)
                    keep.append(settlement)
        # Done with the batch (a replay cancelled at shutdown leaves it here, for _log_unsettled; some of it may
        # have landed, so the log says "not recorded" of at most that many)
        self._replaying.pop(tenant_id, None)
        if keep:
            self._pending[tenant_id] = keep + self._pending.get(tenant_id, [])
            self._pending_count += len(keep)
            self._ensure_retrier()
        else:
            self._mark_up()
        self._metrics.settle_pending.set(self._pending_count)

    # ---- admin: straight to Redis (an admin change must reach every instance, so it cannot fall back) -------
    async def put_tenant(self, tenant: Tenant) -> Tenant:
        return await self.primary.put_tenant(tenant)

    async def delete_tenant(self, tenant_id: str) -> bool:
        deleted = await self.primary.delete_tenant(tenant_id)
        self._forget_tenant(tenant_id)
        return deleted

    def _forget_tenant(self, tenant_id: str, keep_created_ms: int | None = None) -> None:
        """A tenant created again under this id must start clean: without the old one's fail-open buckets and
        budgets, and without its queued usage landing on the new one (settle.lua drops those too, by created_ms,
        on every gateway). `keep_created_ms`: the new tenant's, whose queued settlements stay."""
        self._locals.pop(tenant_id, None)
        self._budgets_left.pop(tenant_id, None)
        self._budgets_seeded.discard(tenant_id)
        queued = self._pending.pop(tenant_id, [])
        kept = [s for s in queued if keep_created_ms is not None and s.tenant_created_ms == keep_created_ms]
        if kept:
            self._pending[tenant_id] = kept
        self._pending_count -= len(queued) - len(kept)
        self._metrics.settle_pending.set(self._pending_count)

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
        request.reserved_out(tenant.default_reservation),
        0,
        0,
        day,
        month,
        lease_end_ms=now + int(request.lease_s * 1000),
        kind=VOID,
        reserved_cost_micro_usd=request.reserved_cost_micro_usd,
        tenant_created_ms=tenant.created_ms,
    )
