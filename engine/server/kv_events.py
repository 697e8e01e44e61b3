"""`GET /v1/kv/events`: the prefix-cache feed routers subscribe to (docs/architecture.md, "KV cache events").

Wire format (SSE; hashes are unsigned 64-bit ints, the chain of sluicegate.block_hash):

    event: snapshot
    data: {"seq": 41, "block_size": 16, "model": "m", "block_hashes": [..every cached block..]}

    event: stored                       also "removed"; "cleared" has "block_hashes": []
    data: {"seq": 42, "block_hashes": [...]}

Sequence numbers are assigned on the engine thread as it takes the engine's events after each step, so they are
strictly increasing by one; the snapshot is taken on the engine thread too, so it holds exactly the events up to its
`seq`. A subscriber registers *before* asking for the snapshot and drops buffered events with seq <= snapshot.seq:
nothing falls between the two. A subscriber that falls `max_buffered_events` behind is cut off; it sees the stream
end (or a gap) and reconnects for a fresh snapshot.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from engine.server import sse

KEEPALIVE_INTERVAL_S = 15.0


@dataclass
class SequencedEvent:
    seq: int
    kind: str  # "stored" | "removed" | "cleared"
    block_hashes: list[int]


@dataclass
class Snapshot:
    seq: int
    block_hashes: list[int]


class Subscription:
    def __init__(self, max_buffered_events: int):
        self.queue: asyncio.Queue[SequencedEvent | None] = asyncio.Queue(maxsize=max_buffered_events)

    def offer(self, event: SequencedEvent | None) -> bool:
        """False when the subscriber is too far behind (the caller drops it)."""
        try:
            self.queue.put_nowait(event)
            return True
        except asyncio.QueueFull:
            return False


class KVEventHub:
    """Fan-out of sequenced events to SSE subscribers. Event-loop side only."""

    def __init__(self, max_buffered_events: int = 100_000):
        self._max_buffered_events = max_buffered_events
        self._subscriptions: set[Subscription] = set()
        self._closed = False

    def subscribe(self) -> Subscription:
        sub = Subscription(self._max_buffered_events)
        if self._closed:
            sub.offer(None)
        else:
            self._subscriptions.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subscriptions.discard(sub)

    def publish(self, events: list[SequencedEvent]) -> None:
        for sub in list(self._subscriptions):
            if not all(sub.offer(e) for e in events):
                self._cut_off(sub)

    def close(self) -> None:
        """End every stream (draining or engine dead); later subscribers get an empty stream."""
        self._closed = True
        for sub in list(self._subscriptions):
            self._cut_off(sub)

    def _cut_off(self, sub: Subscription) -> None:
        # Drop what it has not read: it will resynchronise from a new snapshot, and a clean end beats a gap.
        self._subscriptions.discard(sub)
        while not sub.queue.empty():
            sub.queue.get_nowait()
        sub.offer(None)


async def stream(
    hub: KVEventHub, sub: Subscription, snapshot: Snapshot, block_size: int, model: str
) -> AsyncIterator[bytes]:
    try:
        yield sse.event(
            "snapshot",
            {"seq": snapshot.seq, "block_size": block_size, "model": model, "block_hashes": snapshot.block_hashes},
        )
        while True:
            try:
                event = await asyncio.wait_for(sub.queue.get(), KEEPALIVE_INTERVAL_S)
            except TimeoutError:
                yield sse.KEEPALIVE
                continue
            if event is None:
                return
            if event.seq > snapshot.seq:
                yield sse.event(event.kind, {"seq": event.seq, "block_hashes": event.block_hashes})
    finally:
        hub.unsubscribe(sub)
