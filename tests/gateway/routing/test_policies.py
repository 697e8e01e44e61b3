"""The policies as pure functions of plain data."""

from __future__ import annotations

from collections import Counter

from gateway.routing.config import POLICY_NAMES, PolicyConfig
from gateway.routing.policies import (
    Candidate,
    ConsistentHashPolicy,
    ExpectedTtftPolicy,
    LeastLoadedPolicy,
    PolicyRequest,
    PrefixAffinityPolicy,
    ReplicaLoad,
    RoundRobinPolicy,
    SglangCacheAwarePolicy,
    make_policy,
)
from gateway.routing.policies.base import load_cap


def pool(*inflight: int, matched: tuple[int, ...] = ()) -> list[Candidate]:
    matched = matched or (0,) * len(inflight)
    return [Candidate(f"r{i}", ReplicaLoad(inflight_requests=n), m) for i, (n, m) in enumerate(zip(inflight, matched))]


REQUEST = PolicyRequest(prompt_tokens=160, max_tokens=16, block_hashes=list(range(10)), block_size=16)


def test_round_robin_cycles():
    policy = RoundRobinPolicy()
    assert [policy.choose(REQUEST, pool(0, 0, 0)).index for _ in range(6)] == [0, 1, 2, 0, 1, 2]


def test_least_loaded_picks_fewest_in_flight_and_spreads_ties():
    policy = LeastLoadedPolicy()
    assert policy.choose(REQUEST, pool(3, 1, 2)).index == 1
    assert {policy.choose(REQUEST, pool(0, 0, 0)).index for _ in range(3)} == {0, 1, 2}


def test_load_cap_is_the_bounded_loads_rule():
    assert load_cap(pool(0, 0, 0, 0), 1.25) == 1
    assert load_cap(pool(4, 4, 4, 3), 1.25) == 5  # ceil(1.25 * 16 / 4)
    assert load_cap(pool(4, 4, 4, 3), 1.25, slack_requests=2) == 7


def test_consistent_hash_is_sticky_per_prefix_and_bounded():
    policy = ConsistentHashPolicy(max_load_ratio=1.25, hash_key_blocks=2, virtual_nodes=64)
    requests = [PolicyRequest(100, 1, [key, key + 1, 999], 16) for key in range(0, 2000, 10)]
    first = [policy.choose(r, pool(0, 0, 0, 0)).index for r in requests]
    again = [policy.choose(r, pool(0, 0, 0, 0)).index for r in requests]
    assert first == again
    assert len(set(first)) == 4  # keys spread over the ring
    # The owner of a key is over the cap: the request spills to another replica, never above the cap.
    owner = first[0]
    loads = [1, 1, 1, 1]
    loads[owner] = 5
    spilled = policy.choose(requests[0], pool(*loads)).index
    assert spilled != owner


def test_consistent_hash_moves_few_keys_when_a_replica_leaves():
    policy = ConsistentHashPolicy(virtual_nodes=64)
    requests = [PolicyRequest(100, 1, [key], 16) for key in range(0, 40000, 37)]
    four = [pool(0, 0, 0, 0)[i].name for i in (policy.choose(r, pool(0, 0, 0, 0)).index for r in requests)]
    three_pool = pool(0, 0, 0, 0)[:3]
    three = [three_pool[policy.choose(r, three_pool).index].name for r in requests]
    moved = sum(a != b for a, b in zip(four, three))
    assert moved == sum(a == "r3" for a in four)  # only r3's keys move


def test_consistent_hash_over_a_subset_matches_a_ring_of_that_subset_without_a_rebuild():
    shared = ConsistentHashPolicy(virtual_nodes=64)
    requests = [PolicyRequest(100, 1, [key], 16) for key in range(0, 4000, 37)]
    full, subset = pool(0, 0, 0, 0), [c for c in pool(0, 0, 0, 0) if c.name != "r1"]  # r1 excluded for a retry
    shared.choose(requests[0], full)
    ring = shared._ring
    on_subset = [subset[shared.choose(r, subset).index].name for r in requests]
    fresh = ConsistentHashPolicy(virtual_nodes=64)
    assert on_subset == [subset[fresh.choose(r, subset).index].name for r in requests]
    shared.choose(requests[0], full)
    assert shared._ring is ring  # the ring was built once for all four


def test_prefix_affinity_goes_where_the_prefix_is():
    policy = PrefixAffinityPolicy()
    choice = policy.choose(REQUEST, pool(2, 2, 2, matched=(0, 8, 3)))
    assert (choice.index, choice.reason, choice.saved_tokens) == (1, "prefix", 128)


def test_prefix_affinity_saved_tokens_never_exceed_the_prompt():
    choice = PrefixAffinityPolicy().choose(PolicyRequest(20, 1, [1], 16), pool(0, 0, matched=(0, 5)))
    assert choice.saved_tokens == 20


def test_prefix_affinity_respects_the_load_bound():
    policy = PrefixAffinityPolicy(max_load_ratio=1.25, max_load_slack_requests=0)
    # r1 holds the whole prefix but already carries 6 of 10 in flight; cap = ceil(1.25 * 11 / 3) = 5.
    choice = policy.choose(REQUEST, pool(2, 6, 2, matched=(0, 10, 1)))
    assert choice.index == 2


def test_prefix_affinity_trades_a_short_prefix_for_much_less_load():
    policy = PrefixAffinityPolicy(load_weight=1.0, max_load_slack_requests=100)
    busy = Candidate("busy", ReplicaLoad(inflight_requests=1, inflight_prompt_tokens=5000), matched_blocks=2)
    idle = Candidate("idle", ReplicaLoad(inflight_requests=1), matched_blocks=0)
    choice = policy.choose(REQUEST, [busy, idle])
    assert (choice.index, choice.reason, choice.load_tokens) == (1, "load", 0)
    waiting = Candidate("waiting", ReplicaLoad(waiting_requests=4, kv_usage=0.9), matched_blocks=0)
    assert policy.load_tokens(waiting) == 4 * 512 + 0.9 * 2048


def test_prefix_affinity_spreads_new_prefixes_over_an_idle_pool():
    policy = PrefixAffinityPolicy()
    picks = Counter(policy.choose(REQUEST, pool(0, 0, 0, 0)).index for _ in range(8))
    assert set(picks.values()) == {2}


def test_expected_ttft_trades_a_cache_hit_against_the_prefill_queued_ahead():
    policy = ExpectedTtftPolicy(hit_weight=0.0)
    request = PolicyRequest(prompt_tokens=1000, max_tokens=16, block_hashes=list(range(63)), block_size=16)

    def pool_with(queued: tuple[int, int], matched: tuple[int, int]) -> list[Candidate]:
        loads = [ReplicaLoad(queued_prefill_tokens=q) for q in queued]
        return [Candidate(f"r{i}", load, m) for i, (load, m) in enumerate(zip(loads, matched))]

    # r0 holds 800 tokens of the prompt: worth up to 800 tokens of extra queue, no more.
    assert policy.choose(request, pool_with((700, 0), (50, 0))).index == 0
    assert policy.choose(request, pool_with((900, 0), (50, 0))).index == 1
    # The hit weight values the hit beyond this request's own prefill.
    assert ExpectedTtftPolicy(hit_weight=1.0).choose(request, pool_with((1500, 0), (50, 0))).index == 0


def test_sglang_cache_aware_follows_a_majority_match_else_the_emptiest_index():
    policy = SglangCacheAwarePolicy()
    matched = (6, 2, 0)  # blocks of the 10-block prompt each replica is believed to hold

    def candidates(inflight: tuple[int, ...], matched: tuple[int, ...], indexed: tuple[int, ...]) -> list[Candidate]:
        loads = [ReplicaLoad(inflight_requests=n) for n in inflight]
        return [Candidate(f"r{i}", load, m, x) for i, (load, m, x) in enumerate(zip(loads, matched, indexed))]

    choice = policy.choose(REQUEST, candidates((5, 0, 0), matched, (90, 10, 50)))
    assert (choice.index, choice.reason, choice.saved_tokens) == (0, "prefix", 96)  # 60% > its 0.5 threshold
    # Half the prompt or less is no match: the replica whose index holds the fewest blocks.
    assert policy.choose(REQUEST, candidates((0, 0, 0), (5, 2, 0), (90, 10, 50))).index == 1
    # Imbalanced (more than 32 apart): the least loaded, whatever it holds.
    choice = policy.choose(REQUEST, candidates((40, 3, 7), matched, (90, 10, 50)))
    assert (choice.index, choice.reason) == (1, "load")


def test_every_configurable_policy_is_built_by_name():
    assert {name: make_policy(PolicyConfig(name=name)).name for name in POLICY_NAMES} == {n: n for n in POLICY_NAMES}
