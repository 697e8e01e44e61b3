"""The engine thread's part of a transfer: what a finished prefill hands off, and where a decode replica puts what
it reads (pull_plan.py draws it). Pure functions of the block pool; LLMEngine calls them."""

from __future__ import annotations

from enum import Enum

from engine.block_pool import BlockPool
from engine.kv_transfer.params import Handoff, RemotePrefill
from engine.kv_transfer.pull_plan import PullPlan
from engine.sequence import Sequence
from sluicegate.block_hash import block_hashes


class PullRefusal(Enum):
    """Why a decode replica computes the prompt itself rather than read the remote blocks."""

    MISMATCH = "mismatch"  # the remote blocks hold another prompt or salt (their hash chain differs from ours)
    NO_ROOM = "no_room"  # too few free blocks here


def handoff_of(seq: Sequence, block_size: int) -> Handoff | None:
    """The leading full blocks of a finished prefill's prompt, as many as a decode replica can use: it computes
    the prompt's last token itself (its logits sample the first output token), so never the block holding it."""
    prompt = seq.token_ids[: seq.num_prompt_tokens]
    num_blocks = min((len(prompt) - 1) // block_size, seq.num_computed_tokens // block_size, len(seq.block_table))
    if num_blocks <= 0:
        return None
    prefix_hash = block_hashes(prompt[: num_blocks * block_size], block_size, seq.request.cache_salt)[-1]
    block_ids = tuple(block.block_id for block in seq.block_table[:num_blocks])
    return Handoff(block_ids, num_blocks * block_size, prefix_hash)


def plan_pull(
    pool: BlockPool, block_size: int, prompt: list[int], cache_salt: str, remote: RemotePrefill, reserve_blocks: int
) -> PullPlan | PullRefusal:
    """Take fresh blocks for the remote blocks this replica does not already cache, and a reference on the ones it
    does (so the reads' allocations cannot evict them)."""
    num_blocks = min(len(remote.block_ids), (len(prompt) - 1) // block_size)
    chunks = [tuple(prompt[i * block_size : (i + 1) * block_size]) for i in range(num_blocks)]
    hashes = block_hashes(prompt[: num_blocks * block_size], block_size, cache_salt)
    if num_blocks < len(remote.block_ids) or not hashes or hashes[-1] != remote.prefix_hash:
        return PullRefusal.MISMATCH
    cached = []
    for block_hash, chunk in zip(hashes, chunks):
        block = pool.lookup(block_hash, chunk) if pool.enable_caching else None
        if block is None:
            break
        cached.append(block)
    first = len(cached)
    num_revived = sum(1 for block in cached if block.ref_cnt == 0)
    if pool.num_free_blocks - num_revived - (num_blocks - first) < reserve_blocks:
        return PullRefusal.NO_ROOM
    pool.touch(cached)
    read_blocks = pool.allocate(num_blocks - first)
    return PullPlan(first, read_blocks, hashes[first:], chunks[first:], [*cached, *read_blocks])
