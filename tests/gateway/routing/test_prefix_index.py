"""Prefix matching, the precise and pending indexes, and the bounded, expiring history index (plain data)."""

from __future__ import annotations

from gateway.routing.history_index import HistoryIndex
from gateway.routing.prefix_index import PendingIndex, PreciseIndex, match_prefix


def test_match_counts_leading_blocks_and_stops_at_the_first_miss():
    index = PreciseIndex()
    index.store("a", [1, 2, 3])
    index.store("b", [1, 2, 9, 4])  # holds block 4 but not 3: only its first two blocks are a usable prefix
    index.store("c", [2, 3])  # no block 0: nothing usable
    assert [index.matched_blocks(r, [1, 2, 3, 4]) for r in "abcd"] == [3, 2, 0, 0]
    assert index.matched_blocks("a", []) == 0
    holders = {1: ["a", "b"], 2: ["a", "b"], 3: ["a"], 4: ["b"]}
    assert match_prefix([1, 2, 3, 4], lambda h: holders.get(h, ())) == {"a": 3, "b": 2}
    assert match_prefix([5, 1], lambda h: holders.get(h, ())) == {}


def test_precise_index_replace_remove_clear_and_forget():
    index = PreciseIndex()
    index.store("a", [1, 2])
    index.store("b", [1])
    index.replace("a", [7], block_size=32)
    assert not index.holds("a", 1) and index.holds("a", 7) and index.block_size["a"] == 32
    index.remove("b", [1, 99])
    index.remove("zz", [1])  # unknown replica: nothing to do
    assert index.num_blocks("b") == 0
    index.clear("a")
    assert index.num_blocks("a") == 0 and index.matched_blocks("a", [7]) == 0
    index.store("a", [3])
    index.forget("a")
    assert "a" not in index.block_size and index.num_blocks("a") == 0


def test_pending_index_counts_overlapping_requests():
    pending = PendingIndex()
    pending.add("a", [1, 2])
    pending.add("a", [1])
    pending.discard("a", [1, 2])
    assert pending.matched_blocks("a", [1, 2]) == 1
    pending.discard("a", [1])
    pending.discard("b", [1])  # never added: ignored
    assert pending.num_blocks("a") == 0 and pending.matched_blocks("a", [1]) == 0


def test_history_entries_expire_after_the_ttl():
    history = HistoryIndex(ttl_s=10, max_blocks=100)
    history.record("a", [1, 2], now_s=0)
    history.record("b", [1], now_s=5)
    history.expire(now_s=9.9)
    assert match_prefix([1, 2], history.holders) == {"a": 2, "b": 1}
    history.expire(now_s=10)
    assert match_prefix([1, 2], history.holders) == {"b": 1}
    history.record("b", [1], now_s=12)  # routing again refreshes the entry
    history.expire(now_s=16)
    assert match_prefix([1], history.holders) == {"b": 1}


def test_history_memory_is_bounded_and_trims_leaves_before_roots():
    history = HistoryIndex(ttl_s=1e9, max_blocks=3)
    history.record("a", [1, 2, 3], now_s=0)
    history.record("a", [1, 4], now_s=1)  # 4 entries for 3 places: the oldest leaf (3) goes, the shared root stays
    assert len(history) == 3
    assert match_prefix([1, 2, 3], history.holders) == {"a": 2}
    assert match_prefix([1, 4], history.holders) == {"a": 2}
    assert history.num_blocks("a") == 3
    history.forget("a")
    assert len(history) == 0 and history.num_blocks("a") == 0
