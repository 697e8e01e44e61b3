"""The gateway behind Redis Sentinel (redis+sentinel://): the hot path and redis-py's admin path find the master
through the sentinel, and a SENTINEL FAILOVER in the middle of traffic costs no request (fail_open serves the
moment in between) and no usage (the settlements queued meanwhile land on the new master)."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.gateway.conftest import Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.redis_cluster_servers import SentinelServers

PREFIX = "sn:"
CHAT = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def sentinel_set(tmp_path_factory):
    servers = SentinelServers(tmp_path_factory.mktemp("sentinel")).start()
    yield servers
    servers.stop()


def chat(client: httpx.Client, key: str) -> httpx.Response:
    return client.post(
        "/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "tiny", "messages": CHAT, "max_tokens": 1},
    )


def test_a_failover_mid_traffic(fake, tokenizer_dir, sentinel_set):
    redis = {"socket_timeout_s": 1.0, "failure_mode": "fail_open"}
    config = gateway_config([fake.url], tokenizer_dir, sentinel_set.url, prefix=PREFIX, redis=redis)
    with serve_gateway(config) as gw:
        admin = Admin(gw.url)
        tenant_id = admin.tenant(rpm=10_000)
        key = admin.key(tenant_id)
        statuses: list[int] = []
        stop = threading.Event()

        def traffic() -> None:
            with httpx.Client(base_url=gw.url, timeout=20) as client:
                while not stop.is_set():
                    statuses.append(chat(client, key).status_code)

        sender = threading.Thread(target=traffic)
        sender.start()
        try:
            wait_until(lambda: len(statuses) >= 5, timeout_s=60)
            old_master = sentinel_set.master.port
            sentinel_set.failover()
            after_failover = len(statuses)
            wait_until(lambda: len(statuses) >= after_failover + 5, timeout_s=60)
        finally:
            stop.set()
            sender.join(timeout=60)
        assert sentinel_set.master_port() != old_master
        assert statuses and set(statuses) == {200}, sorted(set(statuses))  # fail_open: nothing refused
        wait_until(lambda: httpx.get(gw.url + "/health").json()["redis"] == "up", timeout_s=30)
        # every request's usage, those settled while the master changed included, is on the new master; the admin
        # API's own pooled connection to the old master may answer one read with a 503 (READONLY) before it moves
        try:
            wait_until(lambda: usage_requests(admin, tenant_id) == len(statuses), timeout_s=30)
        except AssertionError:
            answer = admin.http.get(f"/tenants/{tenant_id}/usage")
            raise AssertionError(f"{answer.status_code} {answer.text[:300]} != {len(statuses)} requests") from None
        new_master = sentinel_set.replica.client(decode_responses=True)
        try:
            assert new_master.info("replication")["role"] == "master"
            assert new_master.exists(f"{PREFIX}{{t:{tenant_id}}}:b:requests")
        finally:
            new_master.close()
        # and the hot path admits on it: Redis' bucket answers, not a fail-open one
        with httpx.Client(base_url=gw.url, timeout=20) as client:
            response = chat(client, key)
        assert response.status_code == 200
        assert httpx.get(gw.url + "/health").json()["redis"] == "up"
        assert gw.gateway.store.primary._fast.discoveries >= 2  # the hot path asked the sentinel again


def usage_requests(admin: Admin, tenant_id: str) -> int | None:
    """The tenant's requests today, or None while the admin API answers with an error."""
    answer = admin.http.get(f"/tenants/{tenant_id}/usage")
    days = answer.json().get("days") if answer.status_code == 200 else None
    return days[0]["requests"] if days else None
