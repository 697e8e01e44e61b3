"""One replica's KV memory, shared by running requests and the prefix cache, in trace blocks (512 tokens).

A prompt block is resident once the step of a request's prefill that computes it has ended (`publish`); from then on
later requests match it. While a request runs, its blocks are referenced and cannot be evicted; when it ends they stay
cached, unreferenced, until space is needed (`make_room`): the engine's eviction policy (engine/prefix_eviction.py,
LRU or GreedyDual-Size-Frequency) picks which go. Blocks a prefill has not computed yet are allocated
(`pending_blocks`) but not matchable: a second request with the same prefix admitted meanwhile computes them again,
as in the engine. Decode tokens are private to their request and freed when it ends.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

from engine.prefix_eviction import EvictionPolicy, PrefixEviction, make_eviction_policy

BLOCK_TOKENS = 512


def leading_blocks(hashes: Sequence[int], held: Container[int]) -> int:
    """How many blocks of a hash chain, from its start, `held` holds: the cached prefix, in blocks."""
    depth = 0
    for block_id in hashes:
        if block_id not in held:
            break
        depth += 1
    return depth


class ReplicaKv:
    def __init__(self, capacity_tokens: int, eviction: PrefixEviction | str = PrefixEviction.GDSF) -> None:
        self.capacity_tokens = capacity_tokens
        self.refs: dict[int, int] = {}
        """Resident block id -> running requests that use it (0: cached only, and in `evictable`)."""
        self.evictable: EvictionPolicy[int] = make_eviction_policy(eviction)
        """Unreferenced resident blocks, in the order the policy evicts them."""
        self.pending_blocks = 0
        self.decode_tokens = 0

    def used_tokens(self) -> int:
        return BLOCK_TOKENS * (len(self.refs) + self.pending_blocks) + self.decode_tokens

    def reclaimable_tokens(self) -> int:
        """Free plus evictable: what running requests may still grow into."""
        return self.capacity_tokens - self.used_tokens() + BLOCK_TOKENS * len(self.evictable)

    def matched_blocks(self, hashes: Sequence[int]) -> int:
        return leading_blocks(hashes, self.refs)

    def make_room(self, tokens: int) -> bool:
        """Evict blocks (the policy's victims) until `tokens` fit; False (nothing evicted) when they cannot."""
        if self.reclaimable_tokens() < tokens:
            return False
        while self.capacity_tokens - self.used_tokens() < tokens:
            del self.refs[self.evictable.evict()]
        return True

    def acquire(self, hashes: Sequence[int], matched: int, headroom_tokens: int = 0) -> bool:
        """Reference the matched prefix and allocate the rest for the prefill, leaving `headroom_tokens` free;
        False (nothing changed) when it does not fit."""
        new_blocks = len(hashes) - matched
        for block_id in hashes[:matched]:  # referenced first, so make_room cannot evict our own prefix
            self._ref(block_id)
        if not self.make_room(BLOCK_TOKENS * new_blocks + headroom_tokens):
            self.release(hashes[:matched])
            return False
        self.pending_blocks += new_blocks
        return True

    def publish(self, hashes: Sequence[int], start: int, end: int) -> None:
        """Blocks start..end of a prefill are computed: they become resident and matchable (a duplicate computed
        meanwhile by another request is freed)."""
        self.pending_blocks -= end - start
        for block_id in hashes[start:end]:
            self._ref(block_id)

    def abort_prefill(self, hashes: Sequence[int], resident: int) -> None:
        """A preempted prefill: its first `resident` blocks (matched or published) are released, the rest freed."""
        self.pending_blocks -= len(hashes) - resident
        self.release(hashes[:resident])

    def release(self, hashes: Sequence[int]) -> None:
        # Deepest first, so the shared root is the most recent: leaves are evicted before the prefixes they extend.
        for block_id in reversed(hashes):
            count = self.refs[block_id] - 1
            self.refs[block_id] = count
            if count == 0:
                self.evictable.free(block_id)

    def _ref(self, block_id: int) -> None:
        count = self.refs.get(block_id)
        if count == 0:
            self.evictable.revive(block_id)
        self.evictable.touch(block_id)  # a use: the hit, or the prefill that computed it
        self.refs[block_id] = (count or 0) + 1
