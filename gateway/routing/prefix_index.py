"""Which replica holds which prompt blocks: the precise index fed by KV events, the in-flight overlay, and matching.

A chain hash names a block *and its whole prefix*, so a replica's usable prefix for a prompt is the run of the
prompt's hashes, from block 0, that the replica holds; matching stops at the first block it lacks (as the engine's
own lookup does). Per replica that is `len(takewhile(blocks.__contains__, hashes))`, a loop that runs in C: with a
handful of replicas it beats an inverted index walked in Python, and it keeps `cleared`, a snapshot or a removed
replica to one set swap. The routing history (history_index.py), keyed the other way round, uses `match_prefix`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from itertools import takewhile


def leading_run(hashes: Sequence[int], held: Collection[int]) -> int:
    """How many of `hashes`, from the first, are in `held`."""
    if not hashes or hashes[0] not in held:
        return 0
    return len(list(takewhile(held.__contains__, hashes)))


def match_prefix(hashes: Sequence[int], holders: Callable[[int], Collection[str]]) -> dict[str, int]:
    """Leading blocks of `hashes` each replica holds, given block -> replicas (for replicas holding block 0)."""
    matched: dict[str, int] = {}
    active: set[str] | None = None
    for depth, block_hash in enumerate(hashes, start=1):
        holding = holders(block_hash)
        active = set(holding) if active is None else active.intersection(holding)
        if not active:
            break
        for name in active:
            matched[name] = depth
    return matched


class PreciseIndex:
    """Blocks each replica reported in its KV events feed (snapshot, stored, removed, cleared)."""

    def __init__(self) -> None:
        self._blocks: dict[str, set[int]] = {}
        self.block_size: dict[str, int] = {}  # replica -> block size from its snapshot

    def replace(self, replica: str, block_hashes: Iterable[int], block_size: int) -> None:
        """A snapshot: the replica holds exactly these blocks now."""
        self._blocks[replica] = set(block_hashes)
        self.block_size[replica] = block_size

    def store(self, replica: str, block_hashes: Iterable[int]) -> None:
        self._blocks.setdefault(replica, set()).update(block_hashes)

    def remove(self, replica: str, block_hashes: Iterable[int]) -> None:
        self._blocks.get(replica, set()).difference_update(block_hashes)

    def clear(self, replica: str) -> None:
        self._blocks.pop(replica, None)

    def forget(self, replica: str) -> None:
        """The replica left the pool."""
        self.clear(replica)
        self.block_size.pop(replica, None)

    def num_blocks(self, replica: str) -> int:
        return len(self._blocks.get(replica, ()))

    def holds(self, replica: str, block_hash: int) -> bool:
        return block_hash in self._blocks.get(replica, ())

    def matched_blocks(self, replica: str, hashes: Sequence[int]) -> int:
        return leading_run(hashes, self._blocks.get(replica, ()))


class PendingIndex:
    """Prefixes of requests in flight on feed replicas: held as soon as routed, before their `stored` events arrive.

    Without it a burst of requests sharing a new prefix would scatter, since the feed reports the blocks only after
    the first request's prefill. Entries go away when the request is released; from then on the feed is the truth.
    """

    def __init__(self) -> None:
        self._counts: dict[str, Counter[int]] = {}

    def add(self, replica: str, block_hashes: Iterable[int]) -> None:
        self._counts.setdefault(replica, Counter()).update(block_hashes)

    def discard(self, replica: str, block_hashes: Iterable[int]) -> None:
        counts = self._counts.get(replica)
        if counts is None:
            return
        for block_hash in block_hashes:
            remaining = counts.get(block_hash, 0) - 1
            if remaining > 0:
                counts[block_hash] = remaining
            else:
                counts.pop(block_hash, None)
        if not counts:
            del self._counts[replica]

    def matched_blocks(self, replica: str, hashes: Sequence[int]) -> int:
        return leading_run(hashes, self._counts.get(replica, ()))

    def num_blocks(self, replica: str) -> int:
        return len(self._counts.get(replica, ()))
