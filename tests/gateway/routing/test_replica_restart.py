"""A replica killed and restarted takes traffic as soon as its probes pass (issue 16's reproduction, real processes).

Before the fix the breaker, opened by the failures while the replica was dead, stayed open for breaker_open_s and
then let one trial through at a time: of 10 concurrent streams 1 got through and 9 were refused with 503.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from gateway.routing import PrefixRouter, RouteRequest, build_router
from gateway.routing.base import ERROR_BEFORE_FIRST_BYTE, OK
from tests.gateway.routing.conftest import wait_until

MODEL = "m"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spawn(port: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "tests.gateway.routing.process_replica", str(port)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)


@pytest.fixture
def replica_process():
    """(port, spawn) where spawn() starts the replica on that port; every process started is killed at the end."""
    port = _free_port()
    started: list[subprocess.Popen] = []

    def spawn() -> subprocess.Popen:
        started.append(_spawn(port))
        return started[-1]

    yield port, spawn
    for process in started:
        _kill(process)


def _request() -> RouteRequest:
    return RouteRequest(MODEL, None, "hello " * 40, 8)


async def _stream(client: httpx.AsyncClient, router: PrefixRouter) -> int:
    """Route, stream the whole answer, release: the gateway's request path in miniature. Returns chunks read."""
    route = router.route(_request())
    chunks = 0
    try:
        body = {"model": MODEL, "prompt": "hello", "max_tokens": 8, "stream": True}
        async with client.stream("POST", f"{route.url}/v1/completions", json=body, timeout=30) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                chunks += line.startswith("data: {")
    except BaseException:
        router.release(route, ERROR_BEFORE_FIRST_BYTE)
        raise
    router.release(route, OK)
    return chunks


async def test_a_restarted_replica_serves_ten_concurrent_streams_once_its_probe_passes(replica_process):
    port, spawn = replica_process
    process = spawn()
    health = {"interval_s": 0.05, "timeout_s": 1.0, "unhealthy_after": 1, "breaker_failures": 1, "breaker_open_s": 600}
    config = {
        MODEL: {"replicas": [{"name": "r0", "url": f"http://127.0.0.1:{port}", "kv_events": False}], "health": health}
    }
    router = build_router(config)
    await router.start()
    try:
        async with httpx.AsyncClient() as client:
            await wait_until(lambda: _serves(port), 30, "the replica process up")
            await wait_until(lambda: router.replicas(MODEL)[0].healthy, 30, "probes see it up")
            assert await _stream(client, router) == 8

            doomed = router.route(_request())  # routed while it is alive, sent after it died
            _kill(process)
            with pytest.raises(httpx.ConnectError):
                await client.post(f"{doomed.url}/v1/completions", json={"max_tokens": 1})
            router.release(doomed, ERROR_BEFORE_FIRST_BYTE)
            assert router.replicas(MODEL)[0].breaker == "open"
            await wait_until(lambda: not router.replicas(MODEL)[0].healthy, 30, "probes mark it down")

            spawn()
            await wait_until(lambda: router.replicas(MODEL)[0].healthy, 30, "probes see it back")
            assert router.replicas(MODEL)[0].breaker == "closed"
            assert await asyncio.gather(*(_stream(client, router) for _ in range(10))) == [8] * 10
    finally:
        await router.close()


def _serves(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
