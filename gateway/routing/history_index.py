"""The approximate prefix index: where the router itself sent each prefix, for replicas without a KV events feed.

Like SGLang's approximate radix tree, but over chain block hashes: routing a prompt to a replica records its
blocks there. The replica's real cache is unknown, so an entry lives `ttl_s` (the guess that the replica still
holds it goes stale) and at most `max_blocks` (replica, block) entries are kept, least recently routed evicted
first. Entries sit in one OrderedDict in last-routed order; with one TTL for all, the oldest entry is also the
first to expire, so expiry and the size bound both pop from the front in O(1) each.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable


class HistoryIndex:
    def __init__(self, ttl_s: float, max_blocks: int) -> None:
        self.ttl_s = ttl_s
        self.max_blocks = max_blocks
        self._expires_at: OrderedDict[tuple[str, int], float] = OrderedDict()
        self._holders: dict[int, set[str]] = {}
        self._num_blocks: dict[str, int] = {}

    def record(self, replica: str, block_hashes: Iterable[int], now_s: float) -> None:
        expires_at = now_s + self.ttl_s
        # Deepest block first, so the shared root ends most recent and the size bound trims leaves before roots.
        for block_hash in reversed(list(block_hashes)):
            key = (replica, block_hash)
            if key in self._expires_at:
                self._expires_at.move_to_end(key)
            else:
                self._holders.setdefault(block_hash, set()).add(replica)
                self._num_blocks[replica] = self._num_blocks.get(replica, 0) + 1
            self._expires_at[key] = expires_at
        while len(self._expires_at) > self.max_blocks:
            self._pop_oldest()

    def expire(self, now_s: float) -> None:
        while self._expires_at and next(iter(self._expires_at.values())) <= now_s:
            self._pop_oldest()

    def forget(self, replica: str) -> None:
        for key in [key for key in self._expires_at if key[0] == replica]:
            self._drop(key)
        self._num_blocks.pop(replica, None)

    def holders(self, block_hash: int) -> Collection[str]:
        return self._holders.get(block_hash, ())

    def num_blocks(self, replica: str) -> int:
        return self._num_blocks.get(replica, 0)

    def __len__(self) -> int:
        return len(self._expires_at)

    def _pop_oldest(self) -> None:
        self._drop(next(iter(self._expires_at)))

    def _drop(self, key: tuple[str, int]) -> None:
        del self._expires_at[key]
        replica, block_hash = key
        holding = self._holders[block_hash]
        holding.discard(replica)
        if not holding:
            del self._holders[block_hash]
        self._num_blocks[replica] -= 1
