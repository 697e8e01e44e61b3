"""Many gateway processes on one Redis (`--workers N`, several hosts): a cold burst waits for a pooled connection
instead of taking Redis for down, and a process killed by SIGKILL frees its tenants' concurrency slots once its
heartbeat stops, not after request_lease_s (900 s), while a live one's leases are left alone."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import httpx
import pytest
import yaml

from gateway.admin.tenants import Tenant
from gateway.metrics import GatewayMetrics
from gateway.store.base import StoreUnavailable
from gateway.store.redis_pool import PoolExhausted
from gateway.store.redis_store import PoolLimits, RedisStore
from gateway.store.resilient import ResilientStore
from tests.gateway.conftest import Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.gated_upstream import GatedUpstream
from tests.gateway.redis_servers import RedisServer
from tests.gateway.servers import ThreadServer, free_port
from tests.gateway.test_concurrency import _wait_ready

CHAT = [{"role": "user", "content": "hi"}]
HEARTBEAT_S = 1.0


@pytest.fixture
def server(tmp_path):
    own = RedisServer(tmp_path).start()
    yield own
    own.stop()


def _chat_status(url: str, key: str) -> int:
    """The status of a streamed chat request; the stream is dropped after its headers (the gateway settles it)."""
    body = {"model": "tiny", "messages": CHAT, "max_tokens": 3, "stream": True}
    headers = {"authorization": f"Bearer {key}"}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, headers=headers, timeout=30) as response:
        return response.status_code


def _held_stream(url: str, key: str) -> None:
    """A stream read until its gateway dies under it (the upstream holds it open meanwhile)."""
    body = {"model": "tiny", "messages": CHAT, "max_tokens": 3, "stream": True}
    headers = {"authorization": f"Bearer {key}"}
    try:
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, headers=headers, timeout=60) as response:
            for _ in response.iter_bytes():
                pass
    except httpx.HTTPError:
        pass


def test_a_cold_burst_waits_for_pooled_connections_instead_of_failing(fake, tokenizer_dir, server):
    """Two pooled connections, a burst of 24 first requests (every one a key lookup): fail_closed must not answer
    a single 503 (redis-py's default pool raised MaxConnectionsError, taken for an outage)."""
    config = gateway_config(
        [fake.url],
        tokenizer_dir,
        f"redis://127.0.0.1:{server.port}/0",
        # a generous socket timeout: on a busy machine a burst can delay a reply past the usual 0.2 s, which is an
        # outage by design; this test is about waiting for a connection
        redis={
            "failure_mode": "fail_closed",
            "pool_max_connections": 2,
            "pool_timeout_s": 10.0,
            "socket_timeout_s": 3.0,
        },
    )
    with serve_gateway(config) as gw:
        admin = Admin(gw.url)
        key = admin.key(admin.tenant(rpm=1000))
        statuses: list[int] = []

        def one() -> None:
            response = httpx.post(
                gw.url + "/v1/chat/completions",
                headers={"authorization": f"Bearer {key}"},
                json={"model": "tiny", "messages": CHAT, "max_tokens": 1},
                timeout=30,
            )
            statuses.append(response.status_code)

        threads = [threading.Thread(target=one) for _ in range(24)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert statuses == [200] * 24
        assert httpx.get(gw.url + "/health").json()["redis"] == "up"


def test_a_pool_wait_that_runs_out_fails_that_call_without_marking_redis_down(server):
    async def main():
        redis_store = RedisStore(f"redis://127.0.0.1:{server.port}/0", "wl:", 5.0, PoolLimits(1, 0.2))
        store = ResilientStore(redis_store, "fail_open", 1.0, 1, GatewayMetrics())
        await store.start()
        await store.put_tenant(Tenant("t1"))
        server.pause()  # the one pooled connection's call now waits on Redis
        holder = asyncio.ensure_future(store.get_tenant("t1"))
        await asyncio.sleep(0.05)
        with pytest.raises(PoolExhausted):
            await store.get_tenant("t1")
        assert store.redis_up  # this gateway's overload, not an outage
        server.resume()
        tenant = await holder
        assert tenant is not None and tenant.id == "t1"
        assert store.redis_up
        await store.close()

    asyncio.run(main())
    assert issubclass(PoolExhausted, StoreUnavailable)  # callers still treat the call itself as failed


def test_a_killed_gateways_leases_are_freed_once_its_heartbeat_stops(tokenizer_dir, server, tmp_path):
    upstream = GatedUpstream()
    url = f"redis://127.0.0.1:{server.port}/0"
    with ThreadServer(upstream.app) as up:
        redis = {"lease_heartbeat_s": HEARTBEAT_S}
        config = gateway_config([up.url], tokenizer_dir, url, prefix="wl:", redis=redis)
        config_path = tmp_path / "gateway.yaml"
        config_path.write_text(yaml.safe_dump(config))
        port = free_port()
        doomed = subprocess.Popen(
            [sys.executable, "-m", "sluicegate.cli", "gateway", "--config", str(config_path), "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            doomed_url = f"http://127.0.0.1:{port}"
            _wait_ready(doomed_url, doomed)
            with serve_gateway(config) as survivor:
                admin = Admin(survivor.url)
                tenant = admin.tenant(max_concurrent=1)
                key = admin.key(tenant)
                held = threading.Thread(target=_held_stream, args=(doomed_url, key))
                held.start()
                wait_until(lambda: upstream.waiting == 1)  # the doomed gateway holds the tenant's only slot

                time.sleep(3 * HEARTBEAT_S)  # its heartbeat keeps a live holder's lease through many intervals
                assert _chat_status(survivor.url, key) == 429

                doomed.kill()
                doomed.wait()
                db = server.client()
                (lease,) = db.zrange(f"wl:{{t:{tenant}}}:inflight", 0, -1, withscores=True)
                assert lease[1] / 1000 > time.time() + 600  # request_lease_s would hold it 15 minutes
                wait_until(lambda: _chat_status(survivor.url, key) == 200, timeout_s=30)
                db.close()
        finally:
            upstream.gate.set()
            if doomed.poll() is None:
                doomed.kill()
            doomed.wait()
            doomed.stderr.close()
