"""Hit-rate bounds at a cluster cache size, from the trace alone (no timing, no routing).

ceiling      one unbounded cache: every repeat of a prefix hits
pooled_lru   one LRU cache of the whole cluster's size: what perfect routing with LRU replicas would reach if
             no prefix were duplicated (not a bound: N routed LRU caches can beat it by luck)
pooled_opt   one cache of the cluster's size with Belady's eviction (the block used furthest in the future goes
             first): no router over N caches of that total size can hit more
A hit is a prompt's leading run of cached blocks, as in the engine; hits are in tokens, over prompt tokens.

And a floor for TTFT (`ttft_floor_s`): each request alone on an idle replica with every hit the unbounded cache
gives it. No routing gets a percentile below the floor's; a goal below it cannot be met by routing at all.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence

from bench.sim.kv import BLOCK_TOKENS, leading_blocks
from bench.sim.profiles import StepProfile
from bench.traces import TraceRequest

_NEVER = float("inf")


def _hit_tokens(request: TraceRequest, depth: int) -> int:
    return min(depth * BLOCK_TOKENS, request.prompt_tokens)


def ceiling_hit_rate(requests: Sequence[TraceRequest]) -> float:
    seen: set[int] = set()
    hits = total = 0
    for request in requests:
        depth = leading_blocks(request.block_hashes, seen)
        hits += _hit_tokens(request, depth)
        total += request.prompt_tokens
        seen.update(request.block_hashes)
    return hits / total


def ttft_floor_s(requests: Sequence[TraceRequest], profile: StepProfile) -> list[float]:
    """Per request: its prefill alone (chunked by the token budget) after the ceiling's hit."""
    seen: set[int] = set()
    floors = []
    for request in requests:
        depth = leading_blocks(request.block_hashes, seen)
        seen.update(request.block_hashes)
        done = min(depth * BLOCK_TOKENS, request.prompt_tokens - 1)
        seconds = 0.0
        while done < request.prompt_tokens:
            chunk = min(profile.token_budget, request.prompt_tokens - done)
            seconds += profile.step_s(chunk, 0, 0, chunk * (done + chunk))
            done += chunk
        floors.append(seconds)
    return floors


def pooled_lru_hit_rate(requests: Sequence[TraceRequest], capacity_blocks: int) -> float:
    cache: OrderedDict[int, None] = OrderedDict()
    hits = total = 0
    for request in requests:
        depth = leading_blocks(request.block_hashes, cache)
        hits += _hit_tokens(request, depth)
        total += request.prompt_tokens
        for block_id in reversed(request.block_hashes):
            cache[block_id] = None
            cache.move_to_end(block_id)
        while len(cache) > capacity_blocks:
            cache.popitem(last=False)
    return hits / total


def pooled_opt_hit_rate(requests: Sequence[TraceRequest], capacity_blocks: int) -> float:
    # next_use[i][j]: the index of the next request after i whose prompt holds block j of request i.
    next_use: list[list[float]] = [[] for _ in requests]
    upcoming: dict[int, float] = {}
    for i in range(len(requests) - 1, -1, -1):
        row = []
        for block_id in requests[i].block_hashes:
            row.append(upcoming.get(block_id, _NEVER))
            upcoming[block_id] = i
        next_use[i] = row
    cached: dict[int, float] = {}  # block id -> its next use
    furthest: list[tuple[float, int]] = []  # max-heap by next use (negated), stale entries skipped
    hits = total = 0
    for i, request in enumerate(requests):
        depth = leading_blocks(request.block_hashes, cached)
        hits += _hit_tokens(request, depth)
        total += request.prompt_tokens
        for block_id, use in zip(request.block_hashes, next_use[i]):
            cached[block_id] = use
            heapq.heappush(furthest, (-use, block_id))
        while len(cached) > capacity_blocks:
            negated, block_id = heapq.heappop(furthest)
            if cached.get(block_id) == -negated:
                del cached[block_id]
    return hits / total
