"""A Redis Cluster master killed under load, its replica taking over: with fail_open no call waits past the
timeouts, every request is admitted (on local buckets while the slot has no master), and once the replica is master
the queued settlements land on it, so usage equals what was served and no lease outlives its request."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.admin.tenants import ApiKey, Tenant, digest_key
from gateway.metrics import GatewayMetrics
from gateway.store.base import AdmitRequest, Settlement
from gateway.store.redis_store import RedisStore
from gateway.store.resilient import ResilientStore
from gateway.store.slots import key_slot
from tests.gateway.redis_cluster_servers import ClusterServers

PREFIX = "fo:"
LEASE_S = 900
HANG_S = 20.0
"""A liveness bound, not a timing goal: a call that has not returned by then is hung."""
BEFORE, DURING = 15, 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    servers = ClusterServers(tmp_path_factory.mktemp("failover"), replicas=1, node_timeout_ms=1000).start()
    yield servers
    servers.stop()


def test_a_master_killed_mid_load_fails_over_and_every_settlement_lands(cluster):
    async def main():
        store = ResilientStore(RedisStore(cluster.url, PREFIX, 0.5), "fail_open", 0.2, 1, GatewayMetrics())
        await store.start()
        tenant = await store.put_tenant(Tenant("t1", rpm=100_000, input_tpm=10**7, output_tpm=10**7))
        key = ApiKey("k1", "t1", digest_key("failover-secret"))
        await store.put_key(key)
        served: list[str] = []
        fallbacks: list[str] = []

        async def one(request_id: str) -> None:
            request = AdmitRequest("t1", key.digest, "m", 10, 20, 1, request_id, LEASE_S)
            admission = await asyncio.wait_for(store.admit(request, tenant, key), HANG_S)
            assert admission.ok, admission.reason
            if admission.fallback:
                fallbacks.append(request_id)
            lease_end_ms = int((time.time() + LEASE_S) * 1000)
            settlement = Settlement(
                "t1", key.digest, "m", request_id, 10, 20, 10, 5, admission.day, admission.month, lease_end_ms,
                tenant_created_ms=tenant.created_ms,
            )  # fmt: skip
            await asyncio.wait_for(store.settle(settlement, admission.store), HANG_S)
            served.append(request_id)

        for i in range(BEFORE):
            await one(f"before{i}")
        slot = key_slot(f"{PREFIX}{{t:t1}}:tenant")
        master = cluster.owner(slot)
        # Replication is asynchronous: what the master took is on its replica before it dies, so the count below is
        # about the gateway, not about writes a failover may lose.
        master.client().execute_command("WAIT", 1, 5000)
        master.kill()
        for i in range(DURING):
            await one(f"during{i}")
            await asyncio.sleep(0.1)  # the load goes on through the failover (node timeout 1 s)
        survivor = next(node for node in cluster.nodes if node is not master)
        deadline = time.monotonic() + 30
        # Until the failover is done and the queue has landed: none left waiting, and no replay still on its way
        # (a batch being replayed has left the queue but not yet reached Redis).
        while cluster.owner(slot, via=survivor) is master or store._pending or store._replaying:
            assert time.monotonic() < deadline, "no failover, or the queue was not replayed"
            await asyncio.sleep(0.1)
        db = cluster.owner(slot, via=survivor).client()
        usage = {
            k.decode(): int(v)
            for k, v in db.hgetall(f"{PREFIX}{{t:t1}}:usage:{time.strftime('%Y%m%d', time.gmtime())}").items()
        }
        assert fallbacks and all(
            r.startswith("during") for r in fallbacks
        )  # local buckets while the slot had no master
        assert usage["requests"] == len(served) == BEFORE + DURING
        assert usage["input_tokens"] == 10 * len(served) and usage["output_tokens"] == 5 * len(served)
        assert db.zcard(f"{PREFIX}{{t:t1}}:inflight") == 0  # no lease outlives its request
        db.close()
        await store.close()

    asyncio.run(main())
