"""Follow one replica's KV cache through its `GET /v1/kv/events` feed (docs/architecture.md) into the precise index.

The feed is SSE. It opens with a `snapshot` (every cached block hash, the block size, the current sequence number),
then `stored` / `removed` / `cleared` events, each numbered one past the previous. Any gap, a delta before the
snapshot, a malformed event or a dropped connection means the index may be wrong: the replica's entries are
cleared and the subscriber reconnects for a fresh snapshot (backing off while the replica is unreachable).

Each event's JSON data carries `seq`, `block_hashes` and, in the snapshot, `block_size`; the event type is the SSE
`event:` field or a `type` key. Hashes may be JSON integers or decimal / 0x-hex strings (64-bit values do not
survive JavaScript's numbers, so some producers quote them).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx

from gateway.routing.prefix_index import PreciseIndex
from sluicegate.sse import SseReader

logger = logging.getLogger(__name__)

SNAPSHOT, STORED, REMOVED, CLEARED = "snapshot", "stored", "removed", "cleared"
_MAX_BACKOFF_S = 10.0
SILENT_FEED_S = 45.0
"""A feed quiet this long is dead (a replica sends a keep-alive every 15 s): a host that vanished without closing the
connection would otherwise leave its blocks in the index for good."""


class FeedResync(Exception):
    """The feed can no longer be trusted (gap, bad event, lost connection): take a new snapshot."""


@dataclass
class KvEvent:
    kind: str
    seq: int
    block_hashes: list[int]
    block_size: int | None = None


def _to_hash(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"block hash {value!r} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return int(value, 0)
    raise ValueError(f"block hash {value!r} is not an integer")


def parse_event(sse_event: str, data: str, sse_id: str | None) -> KvEvent:
    """One SSE message -> KvEvent; raises FeedResync when it is not a well-formed KV event."""
    try:
        payload = json.loads(data)
        kind = sse_event if sse_event != "message" else payload.get("type", sse_event)
        seq = payload.get("seq", sse_id)
        hashes = [_to_hash(h) for h in payload.get("block_hashes", [])]
        block_size = payload.get("block_size")
        event = KvEvent(kind=kind, seq=int(seq), block_hashes=hashes, block_size=block_size)
    except (ValueError, TypeError, AttributeError) as exc:
        raise FeedResync(f"malformed KV event {data[:200]!r}: {exc}") from None
    if event.kind not in (SNAPSHOT, STORED, REMOVED, CLEARED):
        raise FeedResync(f"unknown KV event type {event.kind!r}")
    if event.kind == SNAPSHOT and not (isinstance(block_size, int) and block_size > 0):
        raise FeedResync(f"snapshot without a positive block_size: {block_size!r}")
    return event


class FeedState:
    """Applies events of one feed connection to the index, checking the sequence."""

    def __init__(self, replica: str, index: PreciseIndex) -> None:
        self.replica = replica
        self.index = index
        self.seq: int | None = None

    def apply(self, event: KvEvent) -> None:
        if event.kind == SNAPSHOT:
            assert event.block_size is not None  # parse_event refuses a snapshot without one
            self.index.replace(self.replica, event.block_hashes, event.block_size)
            self.seq = event.seq
            return
        if self.seq is None:
            raise FeedResync(f"{event.kind} event before the snapshot")
        if event.seq <= self.seq:
            return  # a replay of something already applied; sequence numbers only go up
        if event.seq != self.seq + 1:
            raise FeedResync(f"sequence gap: expected {self.seq + 1}, got {event.seq}")
        self.seq = event.seq
        if event.kind == STORED:
            self.index.store(self.replica, event.block_hashes)
        elif event.kind == REMOVED:
            self.index.remove(self.replica, event.block_hashes)
        else:
            self.index.clear(self.replica)


class KvEventsSubscriber:
    """Keeps `index` equal to the replica's cache for as long as it runs (cancel the task to stop)."""

    def __init__(
        self,
        replica: str,
        url: str,
        index: PreciseIndex,
        client: httpx.AsyncClient,
        backoff_s: float,
        on_connected: Callable[[bool], None] = lambda connected: None,
        on_resync: Callable[[str], None] = lambda reason: None,
        on_event: Callable[[str], None] = lambda kind: None,
    ) -> None:
        self.replica = replica
        self.url = url
        self.index = index
        self.client = client
        self.backoff_s = backoff_s
        self.on_connected = on_connected
        self.on_resync = on_resync
        self.on_event = on_event

    async def run(self) -> None:
        delay_s = self.backoff_s
        while True:
            synced = False
            try:
                async for kind in self._follow():
                    synced = synced or kind == SNAPSHOT
                    if synced:
                        delay_s = self.backoff_s  # a working feed resets the backoff
                raise FeedResync("feed closed by the replica")
            except (FeedResync, httpx.HTTPError) as exc:
                self.on_resync(type(exc).__name__ if isinstance(exc, httpx.HTTPError) else "resync")
                logger.info("KV events of %s: %s; resyncing", self.replica, exc)
            except Exception:  # whatever breaks, the feed must come back rather than silently stop
                self.on_resync("error")
                logger.exception("KV events of %s failed; resyncing", self.replica)
            finally:
                self.index.clear(self.replica)
                self.on_connected(False)
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, _MAX_BACKOFF_S)

    async def _follow(self) -> AsyncIterator[str]:
        state = FeedState(self.replica, self.index)
        timeout = httpx.Timeout(5.0, read=SILENT_FEED_S)
        async with self.client.stream("GET", f"{self.url}/v1/kv/events", timeout=timeout) as response:
            if response.status_code != 200:
                raise FeedResync(f"GET /v1/kv/events answered {response.status_code}")
            self.on_connected(True)
            reader = SseReader()
            async for chunk in response.aiter_bytes():
                for message in reader.feed(chunk):
                    event = parse_event(message.event, message.data, message.id)
                    state.apply(event)
                    self.on_event(event.kind)
                    yield event.kind
