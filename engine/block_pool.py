"""The KV block pool: allocate and free with refcounts, and the prefix cache's hash -> block map.

Eviction order
--------------
Blocks whose refcount drops to 0 are free but keep their hash, so a later request with the same prefix can take
them back (a "hit" revives the block). Free blocks with no cached content sit in a queue and are taken first:
using them loses nothing. Only when none is left does an allocation evict a cached block, the one the eviction
policy names (engine/prefix_eviction.py, `EngineConfig.prefix_eviction`): `gdsf` (the default) keeps blocks many
requests used over blocks one prompt used, ageing them as others are evicted; `lru` evicts the least recently freed.
Callers free a sequence's blocks tail-first, so a chain's tail is evicted before its head and the shared head of
many prompts survives longest. Every operation is O(1) (lru) or O(log n) (gdsf).

    uncached:  head -> [b3] <-> [b8] <- tail             (taken first, in free order)
    cached:    policy order, e.g. lru: [b7 tail of A] [b6] [b5 head of A] [b9 tail of B] ... (most recently freed)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine.prefix_eviction import EvictionPolicy, PrefixEviction, make_eviction_policy
from engine.stats import KVEvent


class KVBlock:
    __slots__ = ("block_id", "ref_cnt", "block_hash", "token_ids", "prev_free", "next_free")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: int | None = None  # set while the block is in the prefix cache
        self.token_ids: tuple[int, ...] | None = None  # compared on a hit: a 64-bit collision never serves wrong KV
        self.prev_free: KVBlock | None = None
        self.next_free: KVBlock | None = None


class FreeBlockQueue:
    """Doubly linked list of free blocks (the uncached ones) with sentinels; every operation is O(1)."""

    def __init__(self, blocks: Iterable[KVBlock]):
        self._head = KVBlock(-1)
        self._tail = KVBlock(-1)
        self._head.next_free, self._tail.prev_free = self._tail, self._head
        self.num_free_blocks = 0
        for block in blocks:
            self.append(block)

    def append(self, block: KVBlock) -> None:
        last = self._tail.prev_free
        assert last is not None  # the head sentinel at least
        last.next_free, block.prev_free = block, last
        block.next_free, self._tail.prev_free = self._tail, block
        self.num_free_blocks += 1

    def popleft(self) -> KVBlock:
        block = self._head.next_free
        assert block is not None  # the tail sentinel at least
        if block is self._tail:
            raise ValueError("no free blocks")
        self.remove(block)
        return block

    def remove(self, block: KVBlock) -> None:
        prev, next_ = block.prev_free, block.next_free
        assert prev is not None and next_ is not None  # a queued block sits between two others
        prev.next_free = next_
        next_.prev_free = prev
        block.prev_free = block.next_free = None
        self.num_free_blocks -= 1

    def __iter__(self):
        block = self._head.next_free
        while block is not self._tail:
            yield block
            block = block.next_free


class FreeBlocks:
    """The unreferenced blocks: uncached ones first (a queue, in free order), then cached ones as the policy says."""

    def __init__(self, blocks: list[KVBlock], policy: EvictionPolicy[int]):
        self._blocks = blocks
        self.uncached = FreeBlockQueue(blocks)
        self.policy = policy
        """Keyed by block id: cached, unreferenced blocks are in it; it counts the uses of every cached block."""

    @property
    def num_free_blocks(self) -> int:
        return self.uncached.num_free_blocks + len(self.policy)

    def append(self, block: KVBlock) -> None:
        if block.block_hash is None:
            self.uncached.append(block)
        else:
            self.policy.free(block.block_id)

    def popleft(self) -> KVBlock:
        if self.uncached.num_free_blocks:
            return self.uncached.popleft()
        if not self.policy:
            raise ValueError("no free blocks")
        return self._blocks[self.policy.evict()]

    def remove(self, block: KVBlock) -> None:
        if block.block_id in self.policy:
            self.policy.revive(block.block_id)
        else:
            self.uncached.remove(block)

    def uncache(self, block: KVBlock) -> None:
        """A free cached block loses its content (a cache reset): it moves to the uncached queue."""
        self.policy.forget(block.block_id)
        self.uncached.append(block)

    def __iter__(self):
        yield from self.uncached
        for block_id in self.policy:
            yield self._blocks[block_id]


class BlockPool:
    def __init__(
        self, num_blocks: int, enable_caching: bool, eviction: PrefixEviction | str = PrefixEviction.GDSF
    ) -> None:
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.eviction = PrefixEviction(eviction)
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self.free_queue = FreeBlocks(self.blocks, make_eviction_policy(self.eviction))
        self.cached: dict[int, KVBlock] = {}
        self.events: list[KVEvent] = []  # drained by the engine after each step

    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take now: unreferenced ones, cached or not."""
        return self.free_queue.num_free_blocks

    @property
    def usage(self) -> float:
        return 1.0 - self.num_free_blocks / self.num_blocks

    def allocate(self, num_blocks: int) -> list[KVBlock]:
        if num_blocks > self.free_queue.num_free_blocks:
            raise ValueError(f"asked for {num_blocks} blocks, {self.free_queue.num_free_blocks} free")
        out = []
        evicted = []
        for _ in range(num_blocks):
            block = self.free_queue.popleft()
            if block.block_hash is not None:
                evicted.append(block.block_hash)
                self._uncache(block)
            block.ref_cnt = 1
            out.append(block)
        if evicted:
            self.events.append(KVEvent("removed", evicted))
        return out

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """Take a reference on blocks found in the prefix cache (reviving them if they were free)."""
        for block in blocks:
            if block.ref_cnt == 0:
                self.free_queue.remove(block)
            if block.block_hash is not None:
                self.free_queue.policy.touch(block.block_id)  # one more request uses it
            block.ref_cnt += 1

    def free(self, blocks: Iterable[KVBlock]) -> None:
        """Drop one reference each, in the given order: of blocks the policy ranks alike, the first to reach 0 is the
        first to be evicted."""
        for block in blocks:
            block.ref_cnt -= 1
            if block.ref_cnt < 0:
                raise AssertionError(f"block {block.block_id} freed more often than referenced")
            if block.ref_cnt == 0:
                self.free_queue.append(block)

    def lookup(self, block_hash: int, token_ids: Sequence[int]) -> KVBlock | None:
        block = self.cached.get(block_hash)
        if block is None or block.token_ids != tuple(token_ids):
            return None
        return block

    def cache_blocks(self, blocks: Sequence[KVBlock], hashes: Sequence[int], token_chunks: Sequence[tuple]) -> None:
        """Register full blocks. A hash already cached by another block keeps the first one."""
        stored = []
        for block, block_hash, tokens in zip(blocks, hashes, token_chunks):
            if block_hash in self.cached or block.block_hash is not None:
                continue
            block.block_hash, block.token_ids = block_hash, tokens
            self.cached[block_hash] = block
            self.free_queue.policy.touch(block.block_id)  # its first use: the request that computed it
            stored.append(block_hash)
        if stored:
            self.events.append(KVEvent("stored", stored))

    def _uncache(self, block: KVBlock) -> None:
        block_hash = block.block_hash
        if block_hash is not None and self.cached.get(block_hash) is block:
            del self.cached[block_hash]
        block.block_hash = block.token_ids = None

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash. Only possible when no sequence holds a block."""
        if self.num_free_blocks != self.num_blocks:
            return False
        for block in self.cached.values():
            block.block_hash = block.token_ids = None
            self.free_queue.uncache(block)
        self.cached.clear()
        self.events.append(KVEvent("cleared"))
        return True

    def take_events(self) -> list[KVEvent]:
        events, self.events = self.events, []
        return events
