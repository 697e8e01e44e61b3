"""Which unreferenced prefix-cache block goes first when memory is needed: the eviction policy, apart from the pool.

Pure Python and keyed by any hashable (the engine's KVBlock, the simulator's block ids), so the engine's block
pool (engine/block_pool.py) and the routing simulator (bench/sim/kv.py) run the same code; no torch here.

The caller tells the policy three things: a request used a cached block (`touch`: a hit, or the prefill that
computed it), the block's last reference dropped (`free`: it may be evicted from now on) and a request took an
evictable block back (`revive`). `evict` names the victim and forgets it.

Two policies:

lru   the block freed longest ago goes first (the engine's behaviour before this module).
gdsf  GreedyDual-Size-Frequency (Cherkasova 1998) with every block the same size and cost: a freed block's
      priority is `clock + uses`, the lowest priority goes first, and the clock rises to each victim's priority.
      A prefix used by many requests outlives a burst of one-off prompts that LRU would let push it out, while the
      rising clock ages it: once it stops being used, blocks freed later start above it. Uses count at most
      `max_uses` (as S3-FIFO caps its frequency at 3), so a prefix that was hot once cannot squat for ever.

Chains: a block can only be hit while every block before it is cached, so a parent should never go before its
child. A child is used only together with its parent, so the parent's uses are at least the child's and it is freed
no earlier (callers free a sequence's blocks tail-first); equal priorities go in free order, so the child goes first.
Every operation is O(1) (lru) or O(log n) amortised (gdsf: a heap with lazy deletion, rebuilt when stale entries
outnumber live ones).
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)

DEFAULT_MAX_USES = 3
"""Uses a gdsf block is credited with at most: more than one (one-off prompts go first), small enough to age out."""


class PrefixEviction(enum.StrEnum):
    LRU = "lru"
    GDSF = "gdsf"


class EvictionPolicy(Protocol[K]):
    """The evictable (unreferenced, cached) blocks and the order they go in."""

    def touch(self, key: K) -> None:
        """One more request uses the block (a prefix-cache hit, or the prefill that computed it)."""

    def free(self, key: K) -> None:
        """The block's last reference dropped: it is evictable from now on."""

    def revive(self, key: K) -> None:
        """A request took an evictable block back: it is no longer evictable."""

    def evict(self) -> K:
        """Remove the next victim from the evictable set and forget it; ValueError when there is none."""

    def forget(self, key: K) -> None:
        """The block's cached content is gone (the cache was reset): drop what the policy knew of it."""

    def __len__(self) -> int: ...

    def __contains__(self, key: object) -> bool: ...

    def __iter__(self) -> Iterator[K]: ...


class LruEviction(Generic[K]):
    """Least recently freed first; uses are not counted."""

    def __init__(self) -> None:
        self._order: OrderedDict[K, None] = OrderedDict()

    def touch(self, key: K) -> None:
        pass

    def free(self, key: K) -> None:
        self._order[key] = None

    def revive(self, key: K) -> None:
        del self._order[key]

    def evict(self) -> K:
        if not self._order:
            raise ValueError("no evictable block")
        return self._order.popitem(last=False)[0]

    def forget(self, key: K) -> None:
        self._order.pop(key, None)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: object) -> bool:
        return key in self._order

    def __iter__(self) -> Iterator[K]:
        return iter(self._order)


class GdsfEviction(Generic[K]):
    """GreedyDual-Size-Frequency over equal-sized blocks: lowest `clock + min(uses, max_uses)` first."""

    def __init__(self, max_uses: int = DEFAULT_MAX_USES) -> None:
        if max_uses < 1:
            raise ValueError(f"max_uses must be at least 1, not {max_uses}")
        self.max_uses = max_uses
        self.clock = 0
        """The last victim's priority: a block freed now starts above everything already evicted."""
        self._uses: dict[K, int] = {}  # cached blocks, referenced or not -> requests that used them (capped)
        self._live: dict[K, tuple[int, int]] = {}  # evictable block -> (priority, free order): its heap entry
        self._heap: list[tuple[int, int, K]] = []  # (priority, free order, block), stale entries skipped
        self._order = itertools.count()

    def touch(self, key: K) -> None:
        self._uses[key] = min(self._uses.get(key, 0) + 1, self.max_uses)

    def free(self, key: K) -> None:
        entry = (self.clock + self._uses.get(key, 1), next(self._order))
        self._live[key] = entry
        heapq.heappush(self._heap, (*entry, key))
        if len(self._heap) > 2 * len(self._live) + 64:
            self._heap = [(*entry, block) for block, entry in self._live.items()]
            heapq.heapify(self._heap)

    def revive(self, key: K) -> None:
        del self._live[key]  # its heap entry goes stale

    def evict(self) -> K:
        while self._heap:
            priority, order, key = heapq.heappop(self._heap)
            if self._live.get(key) == (priority, order):
                del self._live[key]
                self._uses.pop(key, None)
                self.clock = priority
                return key
        raise ValueError("no evictable block")

    def forget(self, key: K) -> None:
        self._live.pop(key, None)
        self._uses.pop(key, None)

    def uses(self, key: K) -> int:
        return self._uses.get(key, 0)

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: object) -> bool:
        return key in self._live

    def __iter__(self) -> Iterator[K]:
        return iter(self._live)


def make_eviction_policy(kind: PrefixEviction | str) -> EvictionPolicy:
    kind = PrefixEviction(kind)
    if kind is PrefixEviction.LRU:
        return LruEviction()
    return GdsfEviction()
