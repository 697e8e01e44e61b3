"""The gateway on a real 3-master Redis Cluster (redis+cluster://): the hot path routes each script to the slot's
master and follows ASK and MOVED while a tenant's slot migrates; the admin path (redis-py's RedisCluster) creates,
lists and deletes tenants and keys without CROSSSLOT; two gateway instances hold one tenant to its rpm exactly."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest

from gateway.config import ConfigError, config_from_dict
from gateway.store.base import StoreUnavailable
from gateway.store.cluster import ClusterClient
from gateway.store.redis_url import RedisUrlError, Topology, parse_redis_url
from gateway.store.resp import PreparedCommand
from gateway.store.slots import key_slot
from tests.gateway.conftest import Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.redis_cluster_servers import ClusterServers
from tests.gateway.servers import free_port

PREFIX = "cl:"
CHAT = [{"role": "user", "content": "hi"}]
# A 100 ms Redis timeout turns a busy 2-core box's scheduling stall into an outage; these tests are about routing.
SLOW_BOX = {"socket_timeout_s": 2.0, "failure_mode": "fail_closed"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    servers = ClusterServers(tmp_path_factory.mktemp("cluster")).start()
    yield servers
    servers.stop()


@pytest.fixture(scope="module")
def cluster_config(fake, tokenizer_dir, cluster) -> dict:
    return gateway_config([fake.url], tokenizer_dir, cluster.url, prefix=PREFIX, redis=SLOW_BOX)


@pytest.fixture(scope="module")
def cluster_gateway(cluster_config):
    with serve_gateway(cluster_config) as gw:
        gw.admin = Admin(gw.url)
        yield gw


def chat(url: str, key: str) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "tiny", "messages": CHAT, "max_tokens": 1},
        timeout=20,
    )


def tenant_slot(tenant_id: str) -> int:
    return key_slot(f"{PREFIX}{{t:{tenant_id}}}:tenant")


def tenants_on_every_node(cluster: ClusterServers) -> list[str]:
    """One fresh tenant id per master, chosen by the slot its hash tag falls in."""
    chosen: dict[int, str] = {}
    while len(chosen) < len(cluster.nodes):
        tenant_id = "t" + uuid.uuid4().hex[:10]
        chosen.setdefault(cluster.owner(tenant_slot(tenant_id)).port, tenant_id)
    return list(chosen.values())


def test_requests_and_admin_on_every_master(cluster, cluster_gateway):
    admin = cluster_gateway.admin
    tenants = tenants_on_every_node(cluster)
    keys = {}
    for tenant_id in tenants:
        admin.tenant(tenant_id, rpm=10)
        keys[tenant_id] = admin.key(tenant_id)
    for tenant_id in tenants:
        for _ in range(3):
            response = chat(cluster_gateway.url, keys[tenant_id])
            assert response.status_code == 200, response.text
        assert response.headers["x-ratelimit-remaining-requests"] == "7"  # the cluster's bucket, 3 of 10 taken
        wait_until(lambda tenant_id=tenant_id: admin.usage(tenant_id)["requests"] == 3)
    db = cluster.client()
    try:
        for tenant_id in tenants:  # each tenant's scripts ran on the master that owns its slot
            owner = cluster.owner(tenant_slot(tenant_id))
            node = owner.client()
            assert node.exists(f"{PREFIX}{{t:{tenant_id}}}:b:requests")
            node.close()
        assert set(tenants) <= set(db.smembers(f"{PREFIX}tenants"))
    finally:
        db.close()
    listed = {t["id"] for t in admin.http.get("/tenants").json()["data"]}
    assert set(tenants) <= listed
    # the admin writes that touch an index key and a tenant's keys: each on its own slot, no CROSSSLOT
    gone = tenants[0]
    key_id = admin.http.get(f"/tenants/{gone}/keys").json()["data"][0]["key_id"]
    assert admin.http.delete(f"/tenants/{gone}/keys/{key_id}").status_code in (200, 204)
    assert chat(cluster_gateway.url, keys[gone]).status_code == 401
    assert admin.http.patch(f"/tenants/{tenants[1]}", json={"rpm": 20}).status_code == 200
    assert admin.http.delete(f"/tenants/{tenants[2]}").status_code in (200, 204)
    assert chat(cluster_gateway.url, keys[tenants[2]]).status_code == 401
    assert tenants[2] not in {t["id"] for t in admin.http.get("/tenants").json()["data"]}


def test_two_gateways_hold_one_tenant_to_its_rpm(cluster_config, cluster_gateway):
    rpm = 30
    tenant_id = cluster_gateway.admin.tenant(rpm=rpm)
    key = cluster_gateway.admin.key(tenant_id)
    # num_instances 1 each: were either gateway deciding alone (fail-open buckets), the two would admit 2 x rpm
    with serve_gateway(cluster_config) as other:
        urls = [cluster_gateway.url, other.url]

        async def burst() -> tuple[list[int], float]:
            async with httpx.AsyncClient(timeout=30) as client:
                body = {"model": "tiny", "messages": CHAT, "max_tokens": 1}
                headers = {"authorization": f"Bearer {key}"}
                started = time.monotonic()
                responses = await asyncio.gather(
                    *(client.post(urls[i % 2] + "/v1/chat/completions", json=body, headers=headers) for i in range(90))
                )
                return [r.status_code for r in responses], time.monotonic() - started

        statuses, elapsed_s = asyncio.run(burst())
    admitted = statuses.count(200)
    assert set(statuses) <= {200, 429}, sorted(set(statuses))
    allowance = rpm + rpm / 60 * elapsed_s  # the bucket refills while the burst runs
    assert rpm <= admitted <= allowance, (admitted, allowance)


def test_two_gateways_hold_one_tenant_to_its_output_tokens(cluster_config, cluster_gateway):
    """The output bucket: each request reserves its max_tokens (1) at admission, and the fake upstream generates
    exactly that, so settlement refunds nothing and the count is exact."""
    output_tpm = 20
    key = cluster_gateway.admin.key(cluster_gateway.admin.tenant(rpm=10_000, output_tpm=output_tpm))
    with serve_gateway(cluster_config) as other:
        urls = [cluster_gateway.url, other.url]

        async def burst() -> tuple[list[httpx.Response], float]:
            async with httpx.AsyncClient(timeout=30) as client:
                body = {"model": "tiny", "messages": CHAT, "max_tokens": 1}
                headers = {"authorization": f"Bearer {key}"}
                started = time.monotonic()
                responses = await asyncio.gather(
                    *(client.post(urls[i % 2] + "/v1/chat/completions", json=body, headers=headers) for i in range(60))
                )
                return list(responses), time.monotonic() - started

        responses, elapsed_s = asyncio.run(burst())
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {200, 429}, sorted(set(statuses))
    assert all(r.json()["usage"]["completion_tokens"] == 1 for r in responses if r.status_code == 200)
    admitted = statuses.count(200)
    allowance = output_tpm + output_tpm / 60 * elapsed_s  # the bucket refills while the burst runs
    assert output_tpm <= admitted <= allowance, (admitted, allowance)


def test_the_hot_path_client_follows_ask_then_moved(cluster):
    """ASK (the slot migrating, the key already moved) and MOVED (the slot handed over), on the client itself: a
    script of one key, as heartbeat.lua is. (A script of several keys, as admit.lua, gets TRYAGAIN from the
    target while only some of them exist there: Redis' rule, an outage that failure_mode answers.)"""
    key = f"{{ask-{uuid.uuid4().hex[:8]}}}:n"
    slot = key_slot(key)
    source = cluster.owner(slot)
    target = next(node for node in cluster.nodes if node is not source)

    async def scenario() -> None:
        client = ClusterClient(parse_redis_url(cluster.url), 2.0)
        try:
            sha = await client.call("SCRIPT", "LOAD", "return redis.call('INCR', KEYS[1])")  # on every master
            command = PreparedCommand("EVALSHA", sha, 1, key)
            assert await client.call_prepared(command) == 1
            assert client.owner(slot) == ("127.0.0.1", source.port)
            cluster.begin_migration(slot, source, target)
            assert await client.call_prepared(command) == 2  # ASK: ASKING, then the call, on the target
            assert client.owner(slot) == ("127.0.0.1", source.port)  # an ASK leaves the map as it is
            cluster.end_migration(slot, target)
            refreshes = client.refreshes
            assert await client.call_prepared(command) == 3  # MOVED: sent to the target, the map learnt again
            assert await client.call("GET", key) == "3"
            assert client.owner(slot) == ("127.0.0.1", target.port)
            assert client.refreshes == refreshes + 1
        finally:
            client.close()

    asyncio.run(scenario())


def test_a_failing_node_makes_the_client_learn_the_map_again(cluster):
    dead = free_port()  # a seed nobody listens on: the next seed gives the map
    seeds = ",".join([f"127.0.0.1:{dead}", *(f"127.0.0.1:{node.port}" for node in cluster.nodes)])
    key = f"{{fail-{uuid.uuid4().hex[:8]}}}:n"
    owner = cluster.owner(key_slot(key))

    async def scenario() -> None:
        client = ClusterClient(parse_redis_url(f"redis+cluster://{seeds}"), 0.5)
        try:
            assert await client.call("SET", key, "1") == "OK"
            assert client.refreshes == 1
            owner.pause()
            try:
                with pytest.raises(StoreUnavailable):  # no reply within the timeout: an outage
                    await client.call("GET", key)
            finally:
                owner.resume()
            assert await client.call("GET", key) == "1"
            assert client.refreshes == 2  # the failure made it ask the cluster for the map again
        finally:
            client.close()

    asyncio.run(scenario())


def test_a_moved_tenant_keeps_its_buckets(cluster, cluster_gateway):
    admin = cluster_gateway.admin
    tenant_id = admin.tenant(rpm=100)
    key = admin.key(tenant_id)
    for _ in range(2):
        assert chat(cluster_gateway.url, key).status_code == 200
    slot = tenant_slot(tenant_id)
    source = cluster.owner(slot)
    target = next(node for node in cluster.nodes if node is not source)
    cluster.begin_migration(slot, source, target)
    cluster.end_migration(slot, target)  # the source answers MOVED to both clients
    response = chat(cluster_gateway.url, key)
    assert response.status_code == 200, response.text
    assert response.headers["x-ratelimit-remaining-requests"] == "97"  # the same bucket, moved, not a new one
    wait_until(lambda: admin.usage(tenant_id)["requests"] == 3)
    node = target.client()
    try:
        assert node.exists(f"{PREFIX}{{t:{tenant_id}}}:b:requests")  # the scripts ran on the slot's new owner
    finally:
        node.close()
    source_client = source.client()
    try:
        assert not source_client.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)
    finally:
        source_client.close()


def test_scripts_flushed_from_the_masters_are_loaded_again(cluster, cluster_gateway):
    admin = cluster_gateway.admin
    tenant_id = admin.tenant(rpm=10)
    key = admin.key(tenant_id)
    assert chat(cluster_gateway.url, key).status_code == 200
    for node in cluster.nodes:  # as after a restart without persistence: every master forgot every script
        client = node.client()
        client.script_flush()
        client.close()
    response = chat(cluster_gateway.url, key)  # NOSCRIPT, SCRIPT LOAD on every master, EVALSHA again
    assert response.status_code == 200, response.text
    assert response.headers["x-ratelimit-remaining-requests"] == "8"
    wait_until(lambda: admin.usage(tenant_id)["requests"] == 2)  # the settlement's script, loaded again too


def test_key_slots_match_the_servers(cluster):
    client = cluster.nodes[0].client()
    try:
        for key in ["foo", "{t:acme}:b:requests", "sg:{t:acme}:owners", "a{}b", "{}{x}", "x{y", "sg:keyidx"]:
            assert key_slot(key) == client.execute_command("CLUSTER", "KEYSLOT", key), key
    finally:
        client.close()


def test_cluster_and_sentinel_urls():
    endpoint = parse_redis_url("redis+cluster://u:p%40ss@10.0.0.1:7000,10.0.0.2,[::1]:7002")
    assert endpoint.topology is Topology.CLUSTER
    assert endpoint.seeds == (("10.0.0.1", 7000), ("10.0.0.2", 6379), ("::1", 7002))
    assert (endpoint.username, endpoint.password, endpoint.tls) == ("u", "p@ss", None)
    sentinel = parse_redis_url("rediss+sentinel://s1:26380,s2/mymaster?db=2&ssl_cert_reqs=none")
    assert sentinel.topology is Topology.SENTINEL and sentinel.master_name == "mymaster" and sentinel.db == 2
    assert sentinel.seeds == (("s1", 26380), ("s2", 26379)) and sentinel.tls is not None
    node = sentinel.at("10.1.1.1", 6390)
    assert node.topology is Topology.SINGLE and node.tls == sentinel.tls and node.db == 2
    for url, message in [
        ("redis://a:1,b:2/0", "several hosts"),
        ("redis+cluster://a:1/3", "database 0 only"),
        ("redis+sentinel://a:26379", "master's name"),
        ("redis+cluster://a:x", "bad host:port"),
        ("redis+cluster:///0", "at least one host"),
    ]:
        with pytest.raises(RedisUrlError, match=message):
            parse_redis_url(url)


def test_the_config_accepts_a_cluster_url(cluster):
    config = config_from_dict({"models": {"tiny": {"replicas": ["http://127.0.0.1:9"]}}, "redis": {"url": cluster.url}})
    assert config.redis.endpoint().topology is Topology.CLUSTER
    with pytest.raises(ConfigError, match="several hosts"):
        config_from_dict({"models": {"tiny": {"replicas": ["http://127.0.0.1:9"]}}, "redis": {"url": "redis://a,b"}})
