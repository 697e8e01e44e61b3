"""The simulator's replica KV model: referenced blocks are never evicted, a prefill's blocks match only once
published, and eviction follows the engine's policy (a hot prefix outlives one-off prompts under gdsf, not LRU)."""

from __future__ import annotations

import pytest

from bench.sim.kv import BLOCK_TOKENS, ReplicaKv
from engine.prefix_eviction import PrefixEviction

HOT = [1, 2]


def _run(kv: ReplicaKv, hashes: list[int]) -> int:
    """One request start to end: match, prefill, publish, release; its hit in blocks."""
    matched = kv.matched_blocks(hashes)
    assert kv.acquire(hashes, matched)
    kv.publish(hashes, matched, len(hashes))
    kv.release(hashes)
    return matched


@pytest.mark.parametrize("eviction", list(PrefixEviction))
def test_blocks_match_once_published_and_stay_cached_when_released(eviction):
    kv = ReplicaKv(4 * BLOCK_TOKENS, eviction)
    matched = kv.matched_blocks(HOT)
    assert kv.acquire(HOT, matched)
    assert kv.matched_blocks(HOT) == 0, "a prefill in progress is not matchable"
    assert kv.used_tokens() == 2 * BLOCK_TOKENS
    kv.publish(HOT, matched, len(HOT))
    assert kv.matched_blocks([*HOT, 9]) == 2
    kv.release(HOT)
    assert kv.matched_blocks(HOT) == 2
    assert kv.reclaimable_tokens() == kv.capacity_tokens


@pytest.mark.parametrize("eviction", list(PrefixEviction))
def test_referenced_blocks_are_never_evicted(eviction):
    kv = ReplicaKv(3 * BLOCK_TOKENS, eviction)
    matched = kv.matched_blocks(HOT)
    assert kv.acquire(HOT, matched)
    kv.publish(HOT, matched, len(HOT))  # running: referenced
    assert not kv.acquire([7, 8], 0), "two more blocks do not fit beside a running request's two"
    assert kv.used_tokens() == 2 * BLOCK_TOKENS, "a refused acquire changes nothing"
    assert kv.acquire([7], 0)
    assert kv.matched_blocks(HOT) == 2


@pytest.mark.parametrize(("eviction", "hot_survives"), [(PrefixEviction.GDSF, True), (PrefixEviction.LRU, False)])
def test_a_hot_prefix_outlives_one_off_prompts_only_under_gdsf(eviction, hot_survives):
    kv = ReplicaKv(6 * BLOCK_TOKENS, eviction)
    hits = [_run(kv, [*HOT, 100 + turn]) for turn in range(3)]
    assert hits == [0, 2, 2]
    for prompt in range(3):  # one-off prompts, two blocks each: six more blocks than the two LRU keeps after HOT
        _run(kv, [1000 + 2 * prompt, 1001 + 2 * prompt])
    assert (kv.matched_blocks(HOT) == 2) is hot_survives
    assert kv.used_tokens() <= kv.capacity_tokens
