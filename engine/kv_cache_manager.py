"""Per-sequence block tables on top of the block pool: prefix-cache lookups, slot allocation, copy-on-write for
forked sequences, and swapping to host memory.

Block table of a sequence (block_size 4 here) after a prefix hit on its first two blocks:

    tokens       [t0 t1 t2 t3 | t4 t5 t6 t7 | t8 t9 __ __]
    block_table  [    b12     |     b40     |     b7     ]
                  cached (shared, read-only)   owned, being filled

Only full blocks are ever cached or shared read-only. A partly filled block is shared only after a fork (n > 1),
and the first sibling to write into it gets a private copy.

This class is the only writer of a sequence's block_table, and it only ever appends to the list in place: any
other change (free, fork, copy-on-write, trim, swap-in) puts a new list there. The model runner's persistent batch
(engine/input_batch.py) relies on it to mirror each table incrementally: new entries at the end, or a new list.
"""

from __future__ import annotations

from collections import abc

from engine.block_pool import BlockPool, KVBlock
from engine.kv_cache import KVCache
from engine.sequence import Sequence
from sluicegate.block_hash import next_block_hash, root_hash


class KVCacheManager:
    def __init__(self, pool: BlockPool, kv_cache: KVCache, block_size: int, num_host_blocks: int):
        self.pool = pool
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.enable_caching = pool.enable_caching
        self.free_host_block_ids = list(range(num_host_blocks))

    # -- prefix cache -------------------------------------------------------------------------------------------
    def update_block_hashes(self, seq: Sequence) -> None:
        """Extend seq.block_hashes to cover every full block of its tokens."""
        bs, hashes, tokens = self.block_size, seq.block_hashes, seq.token_ids
        parent = hashes[-1] if hashes else root_hash(seq.request.cache_salt)
        for i in range(len(hashes), len(tokens) // bs):
            parent = next_block_hash(parent, tokens[i * bs : (i + 1) * bs])
            hashes.append(parent)

    def find_cached_prefix(self, seq: Sequence) -> list[KVBlock]:
        """Leading blocks of seq already in the cache. At least one token is always left to compute: its logits
        are what the next step samples from."""
        if not self.enable_caching or seq.needs_every_position:
            return []
        self.update_block_hashes(seq)
        bs, hits = self.block_size, []
        for i in range((seq.num_tokens - 1) // bs):
            block = self.pool.lookup(seq.block_hashes[i], seq.token_ids[i * bs : (i + 1) * bs])
            if block is None:
                break
            hits.append(block)
        return hits

    def commit(self, seq: Sequence, num_tokens: int) -> None:
        """num_tokens more of seq's tokens have their KV in the cache (after a forward pass, or a verification):
        count them, free slots past them (rejected drafts' reservations) and register blocks that became full."""
        seq.num_computed_tokens += num_tokens
        self.trim(seq, seq.num_computed_tokens)
        self.cache_full_blocks(seq)

    def commit_scheduled(self, scheduled: list[tuple[Sequence, int]], skip: abc.Container[int] = ()) -> None:
        """commit() for each (sequence, tokens computed) of a step, in one loop (it runs for every sequence of every
        step), except sequences whose seq_id is in `skip` (speculating ones commit after verification)."""
        bs, caching = self.block_size, self.enable_caching
        for seq, num_tokens in scheduled:
            if skip and seq.seq_id in skip:
                continue
            computed = seq.num_computed_tokens = seq.num_computed_tokens + num_tokens
            if len(seq.block_table) > -(-computed // bs):  # trim(), when it has anything to free
                self.trim(seq, computed)
            if caching and computed // bs > seq.num_cached_blocks:  # cache_full_blocks(), when a block filled
                self.cache_full_blocks(seq)

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Register blocks that became full (all their KV computed) in the prefix cache."""
        if not self.enable_caching:
            return
        bs = self.block_size
        num_full = seq.num_computed_tokens // bs
        if num_full <= seq.num_cached_blocks:
            return
        self.update_block_hashes(seq)
        first = seq.num_cached_blocks
        chunks = [tuple(seq.token_ids[i * bs : (i + 1) * bs]) for i in range(first, num_full)]
        self.pool.cache_blocks(seq.block_table[first:num_full], seq.block_hashes[first:num_full], chunks)
        seq.num_cached_blocks = num_full

    # -- allocation ---------------------------------------------------------------------------------------------
    def allocate_slots(
        self, seq: Sequence, num_new_tokens: int, cached_blocks: abc.Sequence[KVBlock] = (), reserve_blocks: int = 0
    ) -> bool:
        """Make room for num_new_tokens more computed tokens after `cached_blocks` (a prefix hit, for a sequence
        with no blocks yet). Leaves at least reserve_blocks free, or changes nothing and returns False."""
        bs = self.block_size
        start = seq.num_computed_tokens + len(cached_blocks) * bs
        table = seq.block_table
        # A decode inside its last block (15 steps in 16): nothing to allocate, unless the block is shared.
        fits = not cached_blocks and not reserve_blocks and start + num_new_tokens <= len(table) * bs
        if fits and (start % bs == 0 or table[start // bs].ref_cnt <= 1):
            return True
        num_required = -(-(start + num_new_tokens) // bs)
        num_new_blocks = max(0, num_required - len(seq.block_table) - len(cached_blocks))
        cow = self._needs_copy_on_write(seq, start)
        num_revived = sum(1 for b in cached_blocks if b.ref_cnt == 0)  # free-but-cached blocks a hit takes back
        if self.pool.num_free_blocks - (num_new_blocks + cow + num_revived) < reserve_blocks:
            return False
        if cached_blocks:
            self.pool.touch(cached_blocks)
            seq.block_table.extend(cached_blocks)
            seq.num_computed_tokens = start
            seq.num_cached_blocks = len(cached_blocks)
        if cow:
            self._copy_on_write(seq, start // bs)
        if num_new_blocks:
            seq.block_table.extend(self.pool.allocate(num_new_blocks))
        return True

    def _needs_copy_on_write(self, seq: Sequence, start: int) -> bool:
        index = start // self.block_size
        return start % self.block_size != 0 and index < len(seq.block_table) and seq.block_table[index].ref_cnt > 1

    def _copy_on_write(self, seq: Sequence, index: int) -> None:
        shared = seq.block_table[index]
        private = self.pool.allocate(1)[0]
        self.kv_cache.copy_blocks([shared.block_id], [private.block_id])
        self.pool.free([shared])
        seq.block_table = [*seq.block_table[:index], private, *seq.block_table[index + 1 :]]  # a new list: see top

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """child shares all of parent's blocks (one more reference each)."""
        self.pool.touch(parent.block_table)
        child.block_table = list(parent.block_table)
        child.block_hashes = list(parent.block_hashes)
        child.num_cached_blocks = parent.num_cached_blocks
        child.num_computed_tokens = parent.num_computed_tokens

    def drop(self, seq: Sequence) -> None:
        """Preemption by recompute: the KV is gone, so none of seq's tokens count as computed."""
        self.free(seq)
        seq.num_computed_tokens = 0

    def free(self, seq: Sequence) -> None:
        # Tail first: the end of a chain is evicted before its (more widely shared) head.
        self.pool.free(reversed(seq.block_table))
        seq.block_table = []
        seq.num_cached_blocks = 0
        seq.num_draft_computed = 0  # the draft model's KV went with the blocks

    def trim(self, seq: Sequence, num_tokens: int) -> None:
        """Free blocks past the first num_tokens positions (speculation's rejected-draft slots)."""
        keep = -(-num_tokens // self.block_size)
        if len(seq.block_table) > keep:
            self.pool.free(reversed(seq.block_table[keep:]))
            seq.block_table = seq.block_table[:keep]  # a new list: see the module docstring

    # -- swapping -----------------------------------------------------------------------------------------------
    def swap_out(self, seq: Sequence) -> bool:
        """Copy seq's KV to host blocks and free its device blocks; False if host space is short."""
        n = len(seq.block_table)
        if n > len(self.free_host_block_ids):
            return False
        host_ids = [self.free_host_block_ids.pop() for _ in range(n)]
        self.kv_cache.swap_out([b.block_id for b in seq.block_table], host_ids)
        seq.host_block_ids = host_ids
        self.free(seq)
        return True

    def swap_in(self, seq: Sequence, reserve_blocks: int = 0) -> bool:
        n = len(seq.host_block_ids)
        if self.pool.num_free_blocks - n < reserve_blocks:
            return False
        blocks = self.pool.allocate(n)
        self.kv_cache.swap_in(seq.host_block_ids, [b.block_id for b in blocks])
        self.free_host_block_ids.extend(seq.host_block_ids)
        seq.host_block_ids = []
        seq.block_table = blocks
        seq.num_cached_blocks = 0  # fresh copies: cache_full_blocks re-registers them
        return True

    def release_host_blocks(self, seq: Sequence) -> None:
        self.free_host_block_ids.extend(seq.host_block_ids)
        seq.host_block_ids = []
