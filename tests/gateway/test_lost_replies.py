"""A Redis call whose reply is lost (timed out on the gateway, run by Redis all the same) must not double a
settlement or leak a reservation; an error reply must not be taken for an outage. Uses a redis-server of the test's
own: a busy script stalls the whole server, which is how a command can time out on the client and still run."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis

from gateway.admin.tenants import ApiKey, Tenant, digest_key
from gateway.metrics import GatewayMetrics
from gateway.store.base import AdmitRequest, Settlement
from gateway.store.redis_store import RedisStore
from gateway.store.resilient import ResilientStore
from tests.gateway.redis_process import RedisProcess

STALL_MS = 400
SPIN = (
    "local t0 = redis.call('TIME') local s = t0[1] * 1000000 + t0[2] while true do "
    "local t = redis.call('TIME') if t[1] * 1000000 + t[2] - s > tonumber(ARGV[1]) * 1000 then break end end "
    "return 1"
)
LEASE_S = 900


@pytest.fixture
def own(tmp_path):
    server = RedisProcess(str(tmp_path)).start()
    yield server
    server.stop()


def stall(port: int) -> threading.Thread:
    """Keep Redis busy for STALL_MS: commands sent meanwhile time out on the gateway (0.1 s) and run afterwards."""
    thread = threading.Thread(target=lambda: redis.Redis(port=port).eval(SPIN, 0, STALL_MS))
    thread.start()
    time.sleep(0.05)
    return thread


async def setup(own):
    store = ResilientStore(RedisStore(own.url, "lr:", 0.1), "fail_open", 0.05, 1, GatewayMetrics())
    await store.start()
    tenant = await store.put_tenant(Tenant("t1", output_tpm=10_000, daily_tokens=1_000_000, max_concurrent=1))
    key = ApiKey("k1", "t1", digest_key("secret"))
    await store.put_key(key)
    return store, tenant, key


def request(request_id: str, key: ApiKey) -> AdmitRequest:
    return AdmitRequest("t1", key.digest, "m", 10, 100, 1, request_id, LEASE_S)


async def recover(store) -> None:
    """After the stall: one successful call marks Redis up and replays the queue."""
    await asyncio.sleep(0.1)
    await store.get_tenant("t1")
    for _ in range(50):
        if not store._pending and not store._replaying:  # none waiting, none on its way
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the settlement queue was not replayed")


def test_a_settlement_whose_reply_was_lost_is_applied_once(own):
    async def main():
        store, tenant, key = await setup(own)
        admission = await store.admit(request("r1", key), tenant, key)
        assert admission.ok and not admission.fallback
        lease_end_ms = int((time.time() + LEASE_S) * 1000)
        settlement = Settlement(
            "t1", key.digest, "m", "r1", 10, 100, 10, 10, admission.day, admission.month, lease_end_ms
        )
        thread = stall(own.port)
        await store.settle(settlement, admission.store)  # no reply in 0.1 s: queued, but Redis runs it later
        thread.join()
        await recover(store)
        client = own.client()
        assert int(client.hget(f"lr:{{t:t1}}:usage:{admission.day}", "requests")) == 1
        assert int(client.hget("lr:{t:t1}:spent", "d:" + admission.day)) == 20  # 110 reserved, 90 refunded once
        await store.close()

    asyncio.run(main())


def test_an_admission_whose_reply_was_lost_gives_its_reservation_back(own):
    async def main():
        store, tenant, key = await setup(own)
        thread = stall(own.port)
        admission = await store.admit(request("r1", key), tenant, key)
        thread.join()
        assert admission.ok and admission.fallback  # served on the local buckets meanwhile
        await recover(store)
        client = own.client()
        assert client.zcard("lr:{t:t1}:inflight") == 0, "the concurrency slot Redis took was never freed"
        assert int(client.hget("lr:{t:t1}:spent", "d:" + admission.day)) == 0
        assert not client.exists(f"lr:{{t:t1}}:usage:{admission.day}"), "a void settlement counted a request"
        again = await store.admit(request("r2", key), tenant, key)
        assert again.ok and not again.fallback  # max_concurrent=1: the slot is free again
        await store.close()

    asyncio.run(main())


def test_a_settlement_redis_rejects_is_dropped_without_marking_redis_down(own):
    async def main():
        store, tenant, key = await setup(own)
        first = await store.admit(request("r1", key), tenant, key)
        poison = Settlement("t1", key.digest, "m", "r1", 10, 100, 10, 10**30, first.day, first.month)
        await store.settle(poison, first.store)  # HINCRBY cannot take 1e+30: an error reply, not an outage
        assert store.redis_up and not store._pending
        second = await store.admit(request("r2", key), tenant, key)
        assert not second.fallback  # (a script that fails midway keeps its earlier writes: the bucket may be in debt)
        await store.settle(
            Settlement("t1", key.digest, "m", "r2", 10, 100, 10, 5, second.day, second.month), second.store
        )
        assert int(own.client().hget(f"lr:{{t:t1}}:usage:{second.day}", "output_tokens")) == 5
        await store.close()

    asyncio.run(main())
