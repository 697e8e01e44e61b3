"""Fixtures for the routing tests: fake replicas on loopback, and polling helpers (conditions, never timings)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from tests.gateway.routing.fake_replica import FakeReplica


async def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0, what: str = "condition") -> None:
    """Poll until `condition()` holds; fail with `what` if it never does (a hang guard, not a speed assert)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
def fake_replicas():
    started: list[FakeReplica] = []

    def start(**kwargs) -> FakeReplica:
        replica = FakeReplica(**kwargs).start()
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.stop()
