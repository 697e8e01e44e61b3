"""Error replies that mean "not now" (LOADING after a restart, READONLY, BUSY ...) are outages, not rejections:
settlements wait and are replayed (without a later request to trigger it), admissions follow failure_mode; a
tenant's queued settlements land before its next admission; a tenant deleted and created again starts clean.
Real redis-server processes of the tests' own throughout."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
import redis

from gateway.admin.tenants import ApiKey, Tenant, digest_key
from gateway.metrics import GatewayMetrics
from gateway.store import redis_store
from gateway.store.base import AdmitRequest, Settlement
from gateway.store.redis_store import RedisStore
from gateway.store.resilient import ResilientStore
from tests.gateway.conftest import Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.gated_upstream import PROMPT_TOKENS, GatedUpstream
from tests.gateway.redis_servers import RedisServer, fill_for_slow_load
from tests.gateway.servers import ThreadServer

CHAT = [{"role": "user", "content": "hi"}]
FILLER_KEYS = 40_000
KEY_LOAD_DELAY_US = 100  # 40,000 keys: about 4 s of LOADING after a restart
LEASE_S = 900


def stream(url: str, key: str, out: list) -> None:
    client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)
    usage = None
    for chunk in client.chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=50, stream=True, stream_options={"include_usage": True}
    ):
        usage = chunk.usage or usage
    out.append(usage)
    client.close()


def test_streams_ending_while_redis_loads_are_settled_once_it_has(tokenizer_dir, tmp_path):
    """Two streams of a max_concurrent=2 tenant in flight, Redis SIGKILLed and restarted with a slow load: the
    streams end during LOADING. Their usage must reach Redis and their slots must be freed, with no request
    coming by afterwards to trigger it; an admission during LOADING follows fail_open."""
    server = RedisServer(
        tmp_path, "--key-load-delay", str(KEY_LOAD_DELAY_US), "--loading-process-events-interval-bytes", "1024"
    ).start()
    upstream = GatedUpstream()
    try:
        fill_for_slow_load(server, FILLER_KEYS)
        url = f"redis://127.0.0.1:{server.port}/0"
        with ThreadServer(upstream.app) as up:
            config = gateway_config([up.url], tokenizer_dir, url, prefix="oc:", num_instances=2)
            with serve_gateway(config) as gw:
                admin = Admin(gw.url)
                tenant = admin.tenant(max_concurrent=2, rpm=100)
                key = admin.key(tenant)
                usages: list = []
                threads = [threading.Thread(target=stream, args=(gw.url, key, usages)) for _ in range(2)]
                for thread in threads:
                    thread.start()
                wait_until(lambda: upstream.waiting == 2)
                db = server.client()
                assert db.zcard(f"oc:{{t:{tenant}}}:inflight") == 2

                server.kill()
                server.start(wait_loaded=False)
                assert server.loading()
                upstream.gate.set()
                for thread in threads:
                    thread.join(timeout=30)
                during = httpx.post(
                    gw.url + "/v1/chat/completions",
                    headers={"authorization": f"Bearer {key}"},
                    json={"model": "tiny", "messages": CHAT, "max_tokens": 5, "stream": True},
                    timeout=30,
                )
                still_loading = server.loading()
                assert still_loading, "Redis finished loading too soon for this test: raise FILLER_KEYS"
                assert during.status_code == 200  # fail_open: a LOADING Redis is an outage, not a rejection
                assert during.headers["x-ratelimit-limit-requests"] == "50"  # rpm 100 / 2 instances: local
                metrics = httpx.get(gw.url + "/metrics").text
                settled_later = re.search(
                    r'sluicegate_redis_fallbacks_total\{mode="fail_open",op="settle"\} (\S+)', metrics
                )
                assert settled_later and float(settled_later[1]) >= 2  # the streams' settlements met LOADING

                wait_until(lambda: not server.loading(), timeout_s=60)
                # no further request: the gateway notices the recovery itself and replays
                wait_until(lambda: db.zcard(f"oc:{{t:{tenant}}}:inflight") == 0)
                assert len(usages) == 2 and all(u is not None for u in usages)
                # the streams' usage as their clients saw it, and the one served during LOADING (the upstream's 7 + 3)
                expected = {
                    "requests": 3,
                    "input_tokens": sum(u.prompt_tokens for u in usages) + PROMPT_TOKENS,
                    "output_tokens": sum(u.completion_tokens for u in usages) + upstream.pieces,
                }
                wait_until(lambda: {k: admin.usage(tenant).get(k) for k in expected} == expected)
                db.close()
    finally:
        upstream.gate.set()
        server.stop()


# ---- the store itself ---------------------------------------------------------------------------------------------
async def _store(server: RedisServer, retry_interval_s: float = 0.05) -> ResilientStore:
    # a socket timeout well above a busy machine's hiccups: these tests are about error replies and restarts
    redis_store = RedisStore(f"redis://127.0.0.1:{server.port}/0", "oc:", 1.0)
    store = ResilientStore(redis_store, "fail_open", retry_interval_s, 1, GatewayMetrics())
    await store.start()
    return store


async def _tenant(store: ResilientStore, **limits) -> tuple[Tenant, ApiKey]:
    tenant = await store.put_tenant(Tenant("t1", **limits))
    key = ApiKey("k1", "t1", digest_key("secret-" + str(tenant.gen)))
    await store.put_key(key)
    return tenant, key


def _request(key: ApiKey, request_id: str) -> AdmitRequest:
    return AdmitRequest("t1", key.digest, "m", 10, 20, 1, request_id, LEASE_S)


def _settlement(key: ApiKey, request_id: str, admission) -> Settlement:
    lease_end_ms = int((time.time() + LEASE_S) * 1000)
    return Settlement("t1", key.digest, "m", request_id, 10, 20, 10, 5, admission.day, admission.month, lease_end_ms)


@pytest.fixture
def server(tmp_path):
    own = RedisServer(tmp_path).start()
    yield own
    own.stop()


def test_a_tenants_queued_settlements_land_before_its_next_admission(server):
    """Without this, the first admission after an outage meets the slots its own finished requests still hold."""

    async def main():
        store = await _store(server)
        tenant, key = await _tenant(store, max_concurrent=2)
        first = [await store.admit(_request(key, f"r{i}"), tenant, key) for i in range(2)]
        assert all(a.ok and not a.fallback for a in first)
        server.kill()
        for i, admission in enumerate(first):
            await store.settle(_settlement(key, f"r{i}", admission), admission.store)
        assert store._pending  # both wait for Redis
        server.start()
        time.sleep(0.1)  # past the retry interval, blocking this loop: the retry loop has had no chance to run
        again = await store.admit(_request(key, "r2"), tenant, key)
        assert again.ok and not again.fallback, again.reason  # not "concurrency"
        db = server.client()
        assert db.zcard("oc:{t:t1}:inflight") == 1
        usage = db.hgetall(f"oc:{{t:t1}}:usage:{again.day}")
        assert int(usage[b"requests"]) == 2 and int(usage[b"output_tokens"]) == 10
        db.close()
        await store.close()

    asyncio.run(main())


def test_queued_settlements_are_flushed_when_the_gateway_closes(server):
    """A gateway shut down right after Redis came back (its retry loop asleep for minutes) still records them."""

    async def main():
        store = await _store(server, retry_interval_s=600)
        tenant, key = await _tenant(store)
        admission = await store.admit(_request(key, "r0"), tenant, key)
        server.kill()
        await store.settle(_settlement(key, "r0", admission), admission.store)
        assert store._pending
        server.start()
        await store.close()
        db = server.client()
        usage = db.hgetall(f"oc:{{t:t1}}:usage:{admission.day}")
        assert int(usage[b"requests"]) == 1 and int(usage[b"output_tokens"]) == 5
        assert db.zcard("oc:{t:t1}:inflight") == 0
        db.close()

    asyncio.run(main())


def test_settlements_redis_never_took_are_logged_at_shutdown(server, caplog):
    async def main():
        store = await _store(server)
        tenant, key = await _tenant(store)
        admissions = [await store.admit(_request(key, f"r{i}"), tenant, key) for i in range(3)]
        server.kill()
        for i, admission in enumerate(admissions):
            await store.settle(_settlement(key, f"r{i}", admission), admission.store)
        await store.close(flush_timeout_s=2.0)

    with caplog.at_level(logging.ERROR, logger="gateway.store.resilient"):
        asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if "not recorded" in r.getMessage()]
    assert len(lines) == 1 and "3 settlements of tenant t1" in lines[0]
    assert "input_tokens=30 output_tokens=15" in lines[0] and "r0,r1,r2" in lines[0]
    server.start()  # the fixture stops a running server


def test_readonly_redis_is_an_outage_and_the_queue_replays_by_itself(server):
    """A primary demoted to a replica (a failover) refuses writes with READONLY: settlements must wait for a
    writable Redis, not be dropped as rejected."""

    async def main():
        store = await _store(server)
        tenant, key = await _tenant(store, max_concurrent=5, rpm=100)
        admission = await store.admit(_request(key, "r0"), tenant, key)
        db = server.client()
        db.replicaof("127.0.0.1", "1")  # a master that never answers: it keeps its data, read-only
        await store.settle(_settlement(key, "r0", admission), admission.store)
        assert store._pending and not store.redis_up
        refused_meanwhile = await store.admit(_request(key, "r1"), tenant, key)
        assert refused_meanwhile.ok and refused_meanwhile.fallback  # fail_open, not a 503
        db.replicaof("no", "one")
        for _ in range(200):
            if not store._pending and not store._replaying:  # none waiting, none on its way
                break
            await asyncio.sleep(0.02)
        assert not store._pending and not store._replaying and store.redis_up
        assert db.zcard("oc:{t:t1}:inflight") == 0
        assert int(db.hget(f"oc:{{t:t1}}:usage:{admission.day}", "output_tokens")) == 5
        db.close()
        await store.close()

    asyncio.run(main())


def test_a_tenant_created_again_starts_with_clean_fail_open_state(server):
    async def main():
        store = await _store(server, retry_interval_s=60)  # the queue is not replayed before the delete
        tenant, key = await _tenant(store, rpm=2)
        server.kill()
        served = [await store.admit(_request(key, f"old{i}"), tenant, key) for i in range(3)]
        assert [a.ok for a in served] == [True, True, False]  # the old tenant's local bucket is spent
        for i, admission in enumerate(served[:2]):
            await store.settle(_settlement(key, f"old{i}", admission), admission.store)
        assert store._pending
        server.start()
        await store.delete_tenant("t1")  # straight to Redis: this gateway forgets the old tenant's state
        assert not store._pending
        tenant, key = await _tenant(store, rpm=2)
        server.kill()
        fresh = [await store.admit(_request(key, f"new{i}"), tenant, key) for i in range(2)]
        assert all(a.ok and a.fallback for a in fresh)  # a full bucket of its own
        for i, admission in enumerate(fresh):
            await store.settle(_settlement(key, f"new{i}", admission), admission.store)
        server.start()
        await store._replay_tenant("t1")  # (the retry loop would, a minute later)
        db = server.client()
        usage = db.hgetall(f"oc:{{t:t1}}:usage:{fresh[0].day}")
        assert int(usage[b"requests"]) == 2  # its own two, none of the old tenant's
        db.close()
        await store.close()

    asyncio.run(main())


def test_a_tenant_created_again_through_another_gateway_starts_clean_here_too(server):
    """Gateway B holds the old tenant's queued usage and spent fail-open bucket through an outage; gateway A deletes
    the tenant and creates it again. B's queue must not land on the new tenant, nor its old bucket limit it."""

    async def main():
        gateway_a, gateway_b = await _store(server), await _store(server, retry_interval_s=60)
        old, key = await _tenant(gateway_a, rpm=2)
        assert old.created_ms > 0
        server.kill()
        served = [await gateway_b.admit(_request(key, f"old{i}"), old, key) for i in range(3)]
        assert [a.ok for a in served] == [True, True, False]  # B's local bucket for the old tenant is spent
        for i, admission in enumerate(served[:2]):
            settlement = _settlement(key, f"old{i}", admission)
            settlement.tenant_created_ms = old.created_ms
            await gateway_b.settle(settlement, admission.store)
        assert gateway_b._pending
        server.start()
        assert await gateway_a.delete_tenant("t1")
        time.sleep(0.002)  # a new millisecond: the new record's stamp differs
        new, key = await _tenant(gateway_a, rpm=2)
        assert new.created_ms > old.created_ms
        await gateway_b._replay_tenant("t1")  # what B's retry loop does once Redis is back
        db = server.client()
        assert not db.exists(f"oc:{{t:t1}}:usage:{served[0].day}")  # the old tenant's usage was dropped
        server.kill()
        fresh = [await gateway_b.admit(_request(key, f"new{i}"), new, key) for i in range(2)]
        assert all(a.ok and a.fallback for a in fresh)  # a full bucket of its own on B too
        server.start()
        db.close()
        for gateway in (gateway_a, gateway_b):
            await gateway.close(flush_timeout_s=0.5)

    asyncio.run(main())


SPIN = (
    "local t0 = redis.call('TIME') local s = t0[1] * 1000000 + t0[2] while true do "
    "local t = redis.call('TIME') if t[1] * 1000000 + t[2] - s > tonumber(ARGV[1]) * 1000 then break end end "
    "return 1"
)


def test_a_settlement_refused_with_busy_is_applied_once_the_script_ends(tmp_path):
    """BUSY: another client's script ran past busy-reply-threshold. The settlement did not run, so it is replayed
    as it is (once), not dropped as rejected."""
    server = RedisServer(tmp_path, "--busy-reply-threshold", "50").start()

    async def main():
        store = await _store(server)
        tenant, key = await _tenant(store, max_concurrent=5)
        admission = await store.admit(_request(key, "r0"), tenant, key)
        spinner = threading.Thread(target=lambda: server.client().eval(SPIN, 0, 1500))
        spinner.start()
        await asyncio.sleep(0.3)  # past the threshold: Redis answers BUSY to everyone else now
        await store.settle(_settlement(key, "r0", admission), admission.store)
        assert store._pending["t1"][0].replay is False  # refused, not lost: nothing ran
        await asyncio.to_thread(spinner.join)
        for _ in range(200):
            if not store._pending and store.redis_up:
                break
            await asyncio.sleep(0.02)
        db = server.client()
        assert db.zcard("oc:{t:t1}:inflight") == 0
        assert int(db.hget(f"oc:{{t:t1}}:usage:{admission.day}", "requests")) == 1
        db.close()
        await store.close()

    try:
        asyncio.run(main())
    finally:
        server.stop()


def test_a_replica_refuses_the_hot_path_scripts_outright(tmp_path):
    """A master demoted in a failover resyncs from the new one with an empty keyspace for a moment; had it run the
    admission script, the missing key record would have answered "unauthorized" (a 401 for a valid key) and a
    settlement could have been dropped as the old tenant's. The scripts declare themselves (a `#!lua` shebang), so
    a replica refuses them before they read anything: READONLY, an outage."""
    (tmp_path / "master").mkdir()
    (tmp_path / "replica").mkdir()
    master = RedisServer(tmp_path / "master").start()
    replica = RedisServer(tmp_path / "replica", "--replicaof", "127.0.0.1", str(master.port)).start()
    try:
        for script in ("admit.lua", "settle.lua"):
            source = (Path(redis_store.__file__).parent / script).read_text()
            db = replica.client()
            with pytest.raises(redis.exceptions.ReadOnlyError):
                db.eval(source, 12, *[f"x:{{t:t1}}:{i}" for i in range(12)], *["0"] * 16)
            db.close()
    finally:
        replica.stop()
        master.stop()
