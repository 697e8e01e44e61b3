"""The KV events subscriber against a real SSE server on loopback speaking docs/architecture.md's format."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.routing import kv_events
from gateway.routing.kv_events import (
    FeedResync,
    FeedState,
    KvEvent,
    KvEventsSubscriber,
    parse_event,
)
from gateway.routing.prefix_index import PreciseIndex
from tests.gateway.routing.conftest import wait_until


class Feed:
    """A running subscriber for one fake replica, with what it reported."""

    def __init__(self, url: str) -> None:
        self.index = PreciseIndex()
        self.connected = False
        self.resyncs: list[str] = []
        self.client = httpx.AsyncClient()
        self.subscriber = KvEventsSubscriber(
            "r0",
            url,
            self.index,
            self.client,
            backoff_s=0.05,
            on_connected=self._set_connected,
            on_resync=self.resyncs.append,
        )
        self.task = asyncio.create_task(self.subscriber.run())

    def _set_connected(self, connected: bool) -> None:
        self.connected = connected

    def blocks(self) -> set[int]:
        return {h for h in range(1000) if self.index.holds("r0", h)}

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.client.aclose()


async def test_snapshot_then_deltas_follow_the_replica(fake_replicas):
    replica = fake_replicas(block_size=32)
    replica.store([1, 2, 3])
    feed = Feed(replica.url)
    try:
        await wait_until(lambda: feed.blocks() == {1, 2, 3}, what="snapshot applied")
        assert feed.index.block_size["r0"] == 32
        replica.store([4, 5])
        replica.remove([1])
        await wait_until(lambda: feed.blocks() == {2, 3, 4, 5}, what="stored and removed applied")
        replica.clear()
        await wait_until(lambda: feed.blocks() == set(), what="cleared applied")
        assert feed.resyncs == []
        assert replica.feed_connections == 1
    finally:
        await feed.close()


async def test_a_sequence_gap_resyncs_from_a_new_snapshot(fake_replicas):
    replica = fake_replicas()
    replica.store([1])
    feed = Feed(replica.url)
    try:
        await wait_until(lambda: feed.blocks() == {1}, what="snapshot")
        replica.skip_seq()
        replica.store([2])  # arrives with a gap: the subscriber must not trust it, and must resync
        await wait_until(lambda: replica.feed_connections == 2, what="reconnect after the gap")
        await wait_until(lambda: feed.blocks() == {1, 2}, what="state from the new snapshot")
        assert feed.resyncs == ["resync"]
    finally:
        await feed.close()


async def test_a_dropped_connection_clears_then_resyncs(fake_replicas):
    replica = fake_replicas(hash_format="hex")
    replica.store([7, 8])
    feed = Feed(replica.url)
    try:
        await wait_until(lambda: feed.blocks() == {7, 8}, what="snapshot with hex hashes")
        replica.cut_connections()
        replica.store([9])  # happens while the router is not listening: only the snapshot can tell
        await wait_until(lambda: replica.feed_connections == 2 and feed.blocks() == {7, 8, 9}, what="resync")
        assert feed.connected
    finally:
        await feed.close()


async def test_a_feed_gone_silent_clears_then_resyncs(fake_replicas, monkeypatch):
    """A replica host cut off by the network leaves the connection open and quiet: with no keep-alive for
    SILENT_FEED_S the feed is dead, its blocks leave the index, and the subscriber resubscribes."""
    monkeypatch.setattr(kv_events, "SILENT_FEED_S", 0.5)
    replica = fake_replicas()
    replica.store([1, 2])
    feed = Feed(replica.url)
    try:
        await wait_until(lambda: feed.blocks() == {1, 2}, what="snapshot")
        replica.silence_connections()
        replica.store([3])  # only a new snapshot can tell
        await wait_until(lambda: feed.resyncs == ["ReadTimeout"], what="the silence noticed")
        await wait_until(lambda: replica.feed_connections == 2 and feed.blocks() == {1, 2, 3}, what="resync")
    finally:
        await feed.close()


async def test_an_unreachable_replica_leaves_the_index_empty_and_retries():
    client = httpx.AsyncClient()
    index = PreciseIndex()
    index.store("r0", [1])
    resyncs: list[str] = []
    subscriber = KvEventsSubscriber("r0", "http://127.0.0.1:9", index, client, 0.01, on_resync=resyncs.append)
    task = asyncio.create_task(subscriber.run())
    try:
        await wait_until(lambda: len(resyncs) >= 2, what="two failed connection attempts")
        assert index.num_blocks("r0") == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.aclose()


def test_feed_state_rejects_deltas_before_the_snapshot_and_ignores_replays():
    state = FeedState("r0", PreciseIndex())
    with pytest.raises(FeedResync, match="before the snapshot"):
        state.apply(KvEvent("stored", 1, [5]))
    state.apply(KvEvent("snapshot", 10, [1], block_size=16))
    state.apply(KvEvent("stored", 10, [2]))  # a replay of an event the snapshot already covers
    assert not state.index.holds("r0", 2)
    state.apply(KvEvent("stored", 11, [3]))
    assert state.index.holds("r0", 3)


@pytest.mark.parametrize(
    "event, data",
    [
        ("snapshot", '{"seq": 1, "block_hashes": []}'),  # no block size
        ("stored", "not json"),
        ("stored", '{"seq": 2, "block_hashes": [1.5]}'),
        ("stored", '{"seq": 2, "block_hashes": [true]}'),
        ("evicted", '{"seq": 2, "block_hashes": []}'),
        ("stored", '{"block_hashes": [1]}'),  # no sequence number anywhere
    ],
)
def test_malformed_events_force_a_resync(event, data):
    with pytest.raises(FeedResync):
        parse_event(event, data, None)


def test_event_type_and_sequence_may_come_from_the_payload_or_the_sse_id():
    event = parse_event("message", '{"type": "removed", "block_hashes": ["0x10", "17"]}', "42")
    assert (event.kind, event.seq, event.block_hashes) == ("removed", 42, [16, 17])
