"""The eviction policies on their own (pure logic): leaves before the prefixes they extend, frequency over recency,
ageing, and the bookkeeping the block pool relies on (revive, forget, an empty set)."""

from __future__ import annotations

import pytest

from engine.prefix_eviction import (
    DEFAULT_MAX_USES,
    GdsfEviction,
    LruEviction,
    PrefixEviction,
    make_eviction_policy,
)


def _use_chain(policy, chain: list[str], times: int = 1) -> None:
    """`times` requests each use the whole chain, then free it tail-first, as the engine and the simulator do."""
    for _ in range(times):
        for key in chain:
            if key in policy:
                policy.revive(key)
            policy.touch(key)
        for key in reversed(chain):
            policy.free(key)


def _drain(policy) -> list[str]:
    return [policy.evict() for _ in range(len(policy))]


@pytest.mark.parametrize("kind", list(PrefixEviction))
def test_leaves_go_before_the_prefix_they_extend(kind):
    policy = make_eviction_policy(kind)
    _use_chain(policy, ["root", "mid", "leaf"])
    assert _drain(policy) == ["leaf", "mid", "root"]


@pytest.mark.parametrize("kind", list(PrefixEviction))
def test_a_shared_root_outlives_the_branches_that_extend_it(kind):
    policy = make_eviction_policy(kind)
    _use_chain(policy, ["root", "a1", "a2"])
    _use_chain(policy, ["root", "b1", "b2"])
    order = _drain(policy)
    assert order[-1] == "root"
    assert order.index("a2") < order.index("a1") and order.index("b2") < order.index("b1")


def test_frequency_beats_recency():
    """A prefix three requests used, freed before a burst of one-off prompts: LRU evicts it first, gdsf last."""
    lru, gdsf = LruEviction(), GdsfEviction()
    for policy in (lru, gdsf):
        _use_chain(policy, ["hot0", "hot1"], times=3)
        for i in range(4):
            _use_chain(policy, [f"once{i}"])
    assert _drain(lru)[:2] == ["hot1", "hot0"]
    assert _drain(gdsf)[-2:] == ["hot1", "hot0"]


def test_a_prefix_that_stops_being_used_ages_out():
    """The clock rises to each victim's priority, so blocks freed later start above a hot prefix gone quiet."""
    policy = GdsfEviction()
    _use_chain(policy, ["hot"], times=3)
    burst = 0
    while True:  # one-off prompts, each evicting the oldest victim once five are cached
        _use_chain(policy, [f"once{burst}"])
        burst += 1
        if len(policy) > 5 and policy.evict() == "hot":
            break
        assert burst < 100, "the hot prefix never aged out"
    assert policy.clock >= DEFAULT_MAX_USES
    # It outlived the burst for a while: the first one-offs went before it.
    assert burst > 5


def test_uses_are_capped_so_a_once_hot_prefix_cannot_squat():
    """Used a hundred times or three, a prefix gone quiet ages out after the same burst."""
    survived = []
    for times in (DEFAULT_MAX_USES, 100):
        policy = GdsfEviction()
        _use_chain(policy, ["hot"], times=times)
        burst = 0
        while "hot" in policy:
            _use_chain(policy, [f"once{burst}"])
            burst += 1
            if len(policy) > 5:
                policy.evict()
        survived.append(burst)
    assert survived[0] == survived[1]
    assert GdsfEviction(max_uses=1000).max_uses == 1000


def test_a_revived_block_is_not_evictable_until_freed_again():
    for policy in (LruEviction(), GdsfEviction()):
        _use_chain(policy, ["a", "b"])
        policy.revive("a")
        assert "a" not in policy and len(policy) == 1
        assert _drain(policy) == ["b"]
        policy.free("a")
        assert _drain(policy) == ["a"]
        with pytest.raises(ValueError, match="no evictable block"):
            policy.evict()


def test_forget_drops_a_block_and_its_uses():
    policy = GdsfEviction()
    _use_chain(policy, ["a"], times=3)
    assert policy.uses("a") == DEFAULT_MAX_USES
    policy.forget("a")
    assert "a" not in policy and policy.uses("a") == 0 and len(policy) == 0
    with pytest.raises(ValueError):
        policy.evict()


def test_many_revive_and_free_cycles_keep_the_order():
    """Stale heap entries (a block freed, revived, freed again) never resurface as victims."""
    policy = GdsfEviction()
    _use_chain(policy, ["cold"])
    for _ in range(500):
        _use_chain(policy, ["busy"])
    assert _drain(policy) == ["cold", "busy"]


def test_unknown_policy_names_are_refused():
    with pytest.raises(ValueError):
        make_eviction_policy("fifo")
    with pytest.raises(ValueError):
        GdsfEviction(max_uses=0)
