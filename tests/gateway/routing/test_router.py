"""The router over real loopback replicas (health, metrics, KV events): affinity, failover, breaker, drain, removal."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from gateway.routing import (
    NoHealthyReplicaError,
    PrefixRouter,
    ReplicaAdmin,
    RouteRequest,
    UnknownReplicaError,
    build_router,
)
from gateway.routing.base import CLIENT_DISCONNECT, ERROR_BEFORE_FIRST_BYTE, OK
from sluicegate.block_hash import block_hashes
from tests.gateway.routing.conftest import wait_until

FAST_HEALTH = {"interval_s": 0.05, "timeout_s": 1.0, "unhealthy_after": 1, "breaker_failures": 2, "breaker_open_s": 60}


def request(token_ids: list[int], salt: str = "", text: str = "") -> RouteRequest:
    return RouteRequest(
        model="m",
        prompt_token_ids=token_ids,
        prompt_text=text,
        max_tokens=8,
        cache_salt=salt,
        block_hashes=block_hashes(token_ids, 16, salt),
    )


def prompt(seed: int, num_tokens: int = 64) -> list[int]:
    return [(seed * 7919 + i) % 500 for i in range(num_tokens)]


def make_router(replicas, registry=None, **routing) -> PrefixRouter:
    config = {
        "m": {
            "replicas": [{"name": f"r{i}", "url": r.url, "kv_events": True} for i, r in enumerate(replicas)],
            "routing": {"policy": "prefix_affinity", **routing},
            "health": FAST_HEALTH,
            "index": {"resync_backoff_s": 0.05},
        }
    }
    return build_router(config, metrics_registry=registry)


async def started(router: PrefixRouter, replicas) -> PrefixRouter:
    await router.start()
    await wait_until(lambda: all(info.kv_feed_connected for info in router.replicas("m")), what="every feed connected")
    return router


async def test_requests_follow_the_blocks_a_replica_reports(fake_replicas):
    replicas = [fake_replicas(), fake_replicas(), fake_replicas()]
    registry = CollectorRegistry()
    router = await started(make_router(replicas, registry), replicas)
    try:
        tokens = prompt(1)
        replicas[2].store(block_hashes(tokens)[:3])  # r2 holds the first 48 of 64 tokens
        await wait_until(lambda: router.replicas("m")[2].cached_blocks == 3, what="stored event applied")
        route = router.route(request(tokens))
        assert (route.replica, route.matched_prefix_tokens, route.url) == ("r2", 48, replicas[2].url)
        router.release(route, OK)
        replicas[2].remove(block_hashes(tokens)[1:3])  # evicted: only block 0 is left
        await wait_until(lambda: router.replicas("m")[2].cached_blocks == 1, what="removed event applied")
        route = router.route(request(tokens))
        assert (route.replica, route.matched_prefix_tokens) == ("r2", 16)
        router.release(route, OK)
        assert (
            registry.get_sample_value(
                "sluicegate_routing_decisions_total",
                {"model": "m", "replica": "r2", "policy": "prefix_affinity", "reason": "prefix"},
            )
            == 2
        )
        assert registry.get_sample_value("sluicegate_routing_prompt_tokens_total", {"model": "m"}) == 128
        assert (
            registry.get_sample_value("sluicegate_routing_matched_prefix_tokens_total", {"model": "m", "replica": "r2"})
            == 64
        )
    finally:
        await router.close()


async def test_a_burst_sharing_a_new_prefix_stays_together_before_any_event(fake_replicas):
    replicas = [fake_replicas(), fake_replicas(), fake_replicas()]
    router = await started(make_router(replicas), replicas)
    try:
        routes = [router.route(request(prompt(5) + [i] * 16)) for i in range(4)]
        assert len({r.replica for r in routes}) == 1
        assert [r.matched_prefix_tokens for r in routes] == [0, 64, 64, 64]
        for route in routes:
            router.release(route, OK)
        # Released and never reported by the feed: the replica is no longer believed to hold it.
        assert router.route(request(prompt(5))).matched_prefix_tokens == 0
    finally:
        await router.close()


async def test_a_tenant_salt_never_matches_another_tenants_blocks(fake_replicas):
    replicas = [fake_replicas(), fake_replicas()]
    router = await started(make_router(replicas), replicas)
    try:
        tokens = prompt(2)
        replicas[0].store(block_hashes(tokens, 16, "tenant-a"))
        await wait_until(lambda: router.replicas("m")[0].cached_blocks == 4, what="stored")
        assert router.route(request(tokens, salt="tenant-a")).matched_prefix_tokens == 64
        assert router.route(request(tokens, salt="tenant-b")).matched_prefix_tokens == 0
        assert router.route(request(tokens)).matched_prefix_tokens == 0
    finally:
        await router.close()


async def test_a_replica_announcing_another_block_size_is_matched_at_its_size(fake_replicas):
    replicas = [fake_replicas(block_size=32), fake_replicas()]
    router = await started(make_router(replicas), replicas)
    try:
        tokens = prompt(3)
        replicas[0].store(block_hashes(tokens, 32))
        await wait_until(lambda: router.replicas("m")[0].cached_blocks == 2, what="stored")
        route = router.route(request(tokens))
        assert (route.replica, route.matched_prefix_tokens) == ("r0", 64)
    finally:
        await router.close()


async def test_unhealthy_replicas_get_nothing_until_they_recover(fake_replicas):
    replicas = [fake_replicas(), fake_replicas()]
    router = await started(make_router(replicas), replicas)
    try:
        replicas[0].healthy = False
        await wait_until(lambda: not router.replicas("m")[0].healthy, what="r0 marked down")
        assert {router.route(request(prompt(i))).replica for i in range(6)} == {"r1"}
        replicas[1].healthy = False
        await wait_until(lambda: not router.replicas("m")[1].healthy, what="r1 marked down")
        with pytest.raises(NoHealthyReplicaError) as error:
            router.route(request(prompt(0)))
        assert error.value.retry_after_s > 0
        replicas[0].healthy = True
        await wait_until(lambda: router.replicas("m")[0].healthy, what="r0 back")
        assert router.route(request(prompt(0))).replica == "r0"
    finally:
        await router.close()


async def test_failures_open_the_breaker_and_a_retry_excludes_the_failed_replica(fake_replicas):
    replicas = [fake_replicas(), fake_replicas()]
    registry = CollectorRegistry()
    router = await started(make_router(replicas, registry), replicas)
    try:
        tokens = prompt(4)
        replicas[0].store(block_hashes(tokens))
        await wait_until(lambda: router.replicas("m")[0].cached_blocks == 4, what="stored")
        first = router.route(request(tokens))
        assert first.replica == "r0"
        router.release(first, ERROR_BEFORE_FIRST_BYTE)
        retry = router.route(request(tokens), exclude=frozenset({first.replica}))
        assert retry.replica == "r1"
        router.release(retry, OK)
        second = router.route(request(tokens))
        router.release(second, ERROR_BEFORE_FIRST_BYTE)  # second failure in a row: r0's breaker opens
        assert router.replicas("m")[0].breaker == "open"
        assert {router.route(request(tokens)).replica for _ in range(3)} == {"r1"}
        assert registry.get_sample_value("sluicegate_routing_replica_healthy", {"model": "m", "replica": "r0"}) == 0
        with pytest.raises(NoHealthyReplicaError) as error:
            router.route(request(tokens), exclude=frozenset({"r1"}))
        assert 1.0 <= error.value.retry_after_s <= 60
    finally:
        await router.close()


async def test_load_signals_are_scraped_from_metrics(fake_replicas):
    replicas = [fake_replicas(), fake_replicas()]
    replicas[0].waiting_requests = 7
    replicas[0].kv_usage = 0.5
    router = await started(make_router(replicas), replicas)
    try:
        await wait_until(lambda: router.replicas("m")[0].waiting_requests == 7, what="scrape")
        assert router.replicas("m")[0].kv_usage == 0.5
        # Same (empty) cache everywhere: the queue decides.
        assert {router.route(request(prompt(i))).replica for i in range(4)} == {"r1"}
    finally:
        await router.close()


async def test_draining_takes_no_new_requests_and_re_adding_undoes_it(fake_replicas):
    replicas = [fake_replicas(), fake_replicas()]
    router = await started(make_router(replicas), replicas)
    try:
        tokens = prompt(6)
        replicas[0].store(block_hashes(tokens))
        await wait_until(lambda: router.replicas("m")[0].cached_blocks == 4, what="stored")
        in_flight = router.route(request(tokens))
        assert in_flight.replica == "r0"
        assert router.drain_replica("m", "r0").state == "draining"
        assert {router.route(request(tokens)).replica for _ in range(3)} == {"r1"}
        router.release(in_flight, OK)
        assert router.replicas("m")[0].inflight_requests == 0
        assert router.add_replica("m", "r0", replicas[0].url).state == "active"
        assert router.route(request(tokens)).replica == "r0"
    finally:
        await router.close()


async def test_removal_waits_for_in_flight_requests(fake_replicas):
    replicas = [fake_replicas(), fake_replicas()]
    registry = CollectorRegistry()
    router = await started(make_router(replicas, registry), replicas)
    try:
        tokens = prompt(7)
        replicas[0].store(block_hashes(tokens))
        await wait_until(lambda: router.replicas("m")[0].cached_blocks == 4, what="stored")
        in_flight = [router.route(request(tokens)) for _ in range(2)]
        assert {r.replica for r in in_flight} == {"r0"}
        assert router.remove_replica("m", "r0").state == "removing"
        assert [info.name for info in router.replicas("m")] == ["r0", "r1"]  # still there: 2 requests in flight
        moved = router.route(request(tokens))
        assert moved.replica == "r1"
        router.release(in_flight[0], OK)
        assert [info.name for info in router.replicas("m")] == ["r0", "r1"]
        router.release(in_flight[1], CLIENT_DISCONNECT)
        assert [info.name for info in router.replicas("m")] == ["r1"]
        router.release(in_flight[1], OK)  # a double release is harmless
        gone = {"model": "m", "replica": "r0"}
        assert registry.get_sample_value("sluicegate_routing_inflight_requests", gone) is None
        left = [s.name for m in registry.collect() for s in m.samples if s.labels.get("replica") == "r0"]
        assert left == []  # every series labelled with the removed replica is gone, counters included
        assert router.remove_replica("m", "r1").state == "removing"
        assert router.models() == ["m"]
        router.release(moved, OK)
        assert router.models() == []
        with pytest.raises(UnknownReplicaError):
            router.drain_replica("m", "r1")
    finally:
        await router.close()


async def test_added_replicas_start_probes_and_feeds(fake_replicas):
    first, added = fake_replicas(), fake_replicas()
    router = await started(make_router([first]), [first])
    assert isinstance(router, ReplicaAdmin)
    try:
        info = router.add_replica("m", "new", added.url)
        assert (info.name, info.state) == ("new", "active")
        await wait_until(lambda: router.replicas("m")[1].kv_feed_connected, what="feed of the added replica")
        tokens = prompt(8)
        added.store(block_hashes(tokens))
        await wait_until(lambda: router.replicas("m")[1].cached_blocks == 4, what="stored")
        assert router.route(request(tokens)).replica == "new"
        with pytest.raises(ValueError, match="exists"):
            router.add_replica("m", "new", "http://127.0.0.1:1")
        other = router.add_replica("other-model", "x", added.url, kv_events=False)
        assert other.model == "other-model" and "other-model" in router.models()
    finally:
        await router.close()


async def test_replicas_without_a_feed_use_routing_history_and_character_hashes():
    router = build_router(
        {
            "m": {
                "replicas": [{"name": f"r{i}", "url": f"http://127.0.0.1:{i + 1}"} for i in range(3)],
                "routing": {"kv_events": False},
            }
        }
    )  # never started: no probes, replicas stay optimistically healthy
    text = "You are a helpful assistant. " * 10
    no_tokens = RouteRequest(model="m", prompt_token_ids=None, prompt_text=text + "question one", max_tokens=8)
    first = router.route(no_tokens)
    router.release(first, OK)
    again = RouteRequest(model="m", prompt_token_ids=None, prompt_text=text + "question two", max_tokens=8)
    second = router.route(again)
    assert second.replica == first.replica
    assert second.matched_prefix_tokens == 256  # four 64-character blocks of the shared system prompt
    tokens = prompt(9)
    token_route = router.route(request(tokens))
    router.release(token_route, OK)
    assert router.route(request(tokens)).replica == token_route.replica
    with pytest.raises(NoHealthyReplicaError):
        router.route(RouteRequest(model="unknown", prompt_token_ids=None, prompt_text="x", max_tokens=1))


async def test_expected_ttft_counts_a_prompt_as_queued_until_its_first_token():
    router = build_router(
        {
            "m": {
                "replicas": [{"name": f"r{i}", "url": f"http://127.0.0.1:{i + 1}"} for i in range(2)],
                "routing": {"policy": "expected_ttft", "kv_events": False},
            }
        }
    )  # never started: no probes

    def queued(name: str) -> int:
        return router._models["m"].replicas[name].load.queued_prefill_tokens

    long = router.route(request(prompt(1, 640)))
    short = router.route(request(prompt(2, 64)))
    assert short.replica != long.replica  # the long prompt's prefill queues ahead on its replica
    router.first_token(long)
    assert queued(long.replica) == 0
    assert router.route(request(prompt(3, 64))).replica == long.replica  # its prefill is done: it is the lighter
    router.release(long, OK)
    assert queued(long.replica) == 64 and queued(short.replica) == 64
