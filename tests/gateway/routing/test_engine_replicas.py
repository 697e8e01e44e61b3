"""The router in front of REAL engine replicas (`sluicegate engine` subprocesses on the tiny model).

One module, one pair of replicas, scenarios in order: the index follows a replica's KV events (a request sharing a
prefix goes where the first one went, and the engine reports the hit); after the replica evicts, the index forgets;
draining; removal with requests in flight loses none; a replica killed mid-run fails over with no request lost.
The last scenario kills a replica, so the order of the tests matters (pytest keeps file order).

Marked slow: two engine processes import torch and load the model (about 25 s each on a busy 2-core machine).
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.routing import (
    NoHealthyReplicaError,
    PrefixRouter,
    RouteRequest,
    build_router,
)
from gateway.routing.base import ERROR_BEFORE_FIRST_BYTE, ERROR_MID_STREAM, OK
from sluicegate.block_hash import block_hashes
from tests.gateway.routing.conftest import wait_until

NUM_KV_BLOCKS = 40  # 640 tokens per replica: a few 200-token prompts force eviction


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(url: str, process: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"engine replica at {url} exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"engine replica at {url} not healthy after {timeout_s} s")


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engines(tiny_model_dir):
    try:
        import engine.server.cli  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"the engine server is not importable yet: {exc}")
    replicas = []
    for _ in range(2):
        port = _free_port()
        command = [
            sys.executable,
            "-m",
            "sluicegate.cli",
            "engine",
            "--model",
            tiny_model_dir,
            "--port",
            str(port),
            "--num-kv-blocks",
            str(NUM_KV_BLOCKS),
            "--max-model-len",
            "512",
            "--log-level",
            "warning",
            "--served-model-name",
            "tiny",
        ]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        replicas.append((f"http://127.0.0.1:{port}", process))
    try:
        for url, process in replicas:
            _wait_healthy(url, process)
        yield replicas
    finally:
        for _, process in replicas:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
            process.stderr.close()


def make_router(engines, model: str, registry: CollectorRegistry | None = None, **health) -> PrefixRouter:
    config = {
        model: {
            "replicas": [{"name": f"e{i}", "url": url} for i, (url, _) in enumerate(engines)],
            "health": {"interval_s": 0.2, "timeout_s": 2.0, "unhealthy_after": 1, "breaker_failures": 2, **health},
            "index": {"resync_backoff_s": 0.1},
        }
    }
    return build_router(config, metrics_registry=registry)


async def connected(router: PrefixRouter, model: str) -> PrefixRouter:
    await router.start()
    await wait_until(lambda: all(i.kv_feed_connected for i in router.replicas(model)), 30, "feeds connected")
    return router


def tokens(seed: int, n: int = 200) -> list[int]:
    return [(seed * 131 + i * 17) % 500 + 3 for i in range(n)]


def route_request(model: str, token_ids: list[int], max_tokens: int = 2) -> RouteRequest:
    return RouteRequest(model, token_ids, "", max_tokens, block_hashes=block_hashes(token_ids))


async def complete(
    client: httpx.AsyncClient, router: PrefixRouter, model: str, token_ids: list[int], max_tokens: int = 2
) -> tuple[str, dict]:
    """The gateway's request path in miniature: route, send, release; retry once elsewhere before the first byte."""
    request = route_request(model, token_ids, max_tokens)
    exclude: frozenset[str] = frozenset()
    for _attempt in range(2):
        route = router.route(request, exclude)
        body = {"model": model, "prompt": token_ids, "max_tokens": max_tokens, "ignore_eos": True}
        try:
            response = await client.post(f"{route.url}/v1/completions", json=body, timeout=60)
        except httpx.HTTPError:
            router.release(route, ERROR_BEFORE_FIRST_BYTE)
            exclude = frozenset({route.replica})
            continue
        if response.status_code >= 500:
            router.release(route, ERROR_BEFORE_FIRST_BYTE)
            exclude = frozenset({route.replica})
            continue
        router.release(route, OK if response.status_code == 200 else ERROR_MID_STREAM)
        assert response.status_code == 200, response.text
        return route.replica, response.json()
    raise AssertionError(f"request failed on two replicas: {exclude}")


def holds(router: PrefixRouter, replica: str, token_ids: list[int]) -> bool:
    return router._models["tiny"].precise.holds(replica, block_hashes(token_ids)[0])


async def test_a_shared_prefix_follows_the_first_request_and_is_forgotten_after_eviction(engines):
    router = await connected(make_router(engines, "tiny"), "tiny")
    try:
        async with httpx.AsyncClient() as client:
            first = tokens(1)
            served_by, _ = await complete(client, router, "tiny", first)
            await wait_until(lambda: holds(router, served_by, first), 30, "stored events of the first prompt")
            follow_up = first[:160] + tokens(2, 40)
            route = router.route(route_request("tiny", follow_up))
            assert (route.replica, route.matched_prefix_tokens) == (served_by, 160)
            router.release(route, OK)
            replica, body = await complete(client, router, "tiny", follow_up)
            assert replica == served_by
            assert body["usage"]["prompt_tokens_details"]["cached_tokens"] >= 144  # the engine agrees: a real hit

            # Fill the replica's 40 blocks with other prompts sent straight to it: it evicts the first prompt.
            url = dict((f"e{i}", u) for i, (u, _) in enumerate(engines))[served_by]
            for seed in range(10, 16):
                body = {"model": "tiny", "prompt": tokens(seed), "max_tokens": 1}
                assert (await client.post(f"{url}/v1/completions", json=body, timeout=60)).status_code == 200
            await wait_until(lambda: not holds(router, served_by, first), 30, "removed events of the first prompt")
            assert router.route(route_request("tiny", first)).matched_prefix_tokens == 0
    finally:
        await router.close()


async def test_draining_and_removal_lose_no_request(engines):
    router = await connected(make_router(engines, "tiny"), "tiny")
    try:
        async with httpx.AsyncClient() as client:
            router.drain_replica("tiny", "e0")
            served = [(await complete(client, router, "tiny", tokens(seed, 40)))[0] for seed in range(20, 24)]
            assert set(served) == {"e1"}
            router.add_replica("tiny", "e0", engines[0][0])  # back in service

            # Long requests in flight on both replicas; remove e0 while they run.
            in_flight = [
                asyncio.create_task(complete(client, router, "tiny", tokens(seed, 40), max_tokens=48))
                for seed in range(30, 36)
            ]
            await wait_until(lambda: router.replicas("tiny")[0].inflight_requests > 0, 30, "requests on e0")
            assert router.remove_replica("tiny", "e0").state == "removing"
            more = [(await complete(client, router, "tiny", tokens(seed, 40)))[0] for seed in range(40, 43)]
            assert set(more) == {"e1"}
            results = await asyncio.gather(*in_flight)
            assert [body["usage"]["completion_tokens"] for _, body in results] == [48] * 6
            assert [info.name for info in router.replicas("tiny")] == ["e1"]
    finally:
        await router.close()


async def test_a_replica_that_dies_mid_run_fails_over_without_losing_requests(engines):
    registry = CollectorRegistry()
    # Probes far apart: only the failed requests themselves (passive health) can tell the router e0 died.
    router = await connected(make_router(engines, "tiny", registry, interval_s=60, breaker_failures=1), "tiny")
    probing = make_router(engines, "tiny")
    try:
        async with httpx.AsyncClient() as client:
            results = []
            for seed in range(50, 56):
                results.append(await complete(client, router, "tiny", tokens(seed, 40)))
                if seed == 52:
                    engines[0][1].send_signal(signal.SIGKILL)  # e0 dies between requests, the router not told
                    engines[0][1].wait(timeout=30)
            assert [body["usage"]["completion_tokens"] for _, body in results] == [2] * 6
            assert {replica for replica, _ in results[3:]} == {"e1"}
            failed = {"model": "tiny", "replica": "e0", "outcome": ERROR_BEFORE_FIRST_BYTE}
            assert registry.get_sample_value("sluicegate_routing_outcomes_total", failed) == 1  # then the breaker
            assert router.replicas("tiny")[0].breaker == "open"
            with pytest.raises(NoHealthyReplicaError):
                router.route(route_request("tiny", tokens(60, 40)), exclude=frozenset({"e1"}))
        await probing.start()  # and active health marks it down too
        await wait_until(lambda: not probing.replicas("tiny")[0].healthy, 30, "e0 marked down by probes")
        assert not probing.replicas("tiny")[0].kv_feed_connected
    finally:
        await router.close()
        await probing.close()
