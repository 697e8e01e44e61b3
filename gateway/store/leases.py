"""Heartbeats for this gateway instance's concurrency leases, so a worker killed by SIGKILL frees its tenants'
max_concurrent slots within `heartbeat_s` instead of holding them for request_lease_s (900 s).

A lease in a tenant's in-flight set is a request id, and a request id up to its last '-' names the gateway instance
that holds it (`req-<random>-<n>`, gateway/runtime.py). Each admission records its owner's heartbeat deadline
(admit.lua); while this instance holds leases of a tenant, it renews that deadline every third of `heartbeat_s`
(heartbeat.lua, Redis' clock). An admission that finds the tenant at max_concurrent drops the leases of owners whose
deadline has passed, in the same atomic step. All of it stays in the tenant's hash tag (Cluster-safe).

A live instance cut off from Redis for longer than `heartbeat_s` may lose its leases that way (its tenants briefly
run over max_concurrent); its settlements still apply in full, since one that never reached Redis is not taken
for a resend of one that did (resilient.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


def owner_of(request_id: str) -> str | None:
    """The instance part of a request id (admit.lua's `^(.*%-)`): up to and including its last '-'."""
    head, dash, _ = request_id.rpartition("-")
    return head + dash if dash else None


class LeaseHeartbeat:
    def __init__(self, beat: Callable[[str, str], Awaitable[None]], heartbeat_s: float) -> None:
        """`beat(tenant_id, owner)` renews one owner's deadline in one tenant; heartbeat_s 0 turns it all off."""
        self._beat = beat
        self._interval_s = heartbeat_s / 3
        self._held: Counter[tuple[str, str]] = Counter()  # (tenant, owner) -> leases held in Redis
        self._task: asyncio.Task[None] | None = None

    def held(self, tenant_id: str, request_id: str) -> None:
        """Redis admitted the request: its lease is held until `released`."""
        owner = owner_of(request_id)
        if owner is None or self._interval_s <= 0:
            return
        self._held[(tenant_id, owner)] += 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def released(self, tenant_id: str, request_id: str) -> None:
        owner = owner_of(request_id)
        if owner is None or (tenant_id, owner) not in self._held:
            return
        self._held[(tenant_id, owner)] -= 1
        if self._held[(tenant_id, owner)] <= 0:
            del self._held[(tenant_id, owner)]

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while self._held:
            await asyncio.sleep(self._interval_s)
            held = list(self._held)
            results = await asyncio.gather(*(self._beat(*pair) for pair in held), return_exceptions=True)
            failed = sum(isinstance(result, Exception) for result in results)
            if failed:  # Redis down or slow: nothing to do but try again next time
                log.debug("lease heartbeat: %d of %d tenants not renewed", failed, len(held))
