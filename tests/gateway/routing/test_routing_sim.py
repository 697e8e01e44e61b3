"""The routing simulator (bench/sim) behaves like the engine it stands for: step times, cache visibility, pressure."""

from __future__ import annotations

import pytest

from bench.sim.bounds import ceiling_hit_rate, pooled_lru_hit_rate, pooled_opt_hit_rate
from bench.sim.cluster import ClusterSpec, simulate, time_scale
from bench.sim.kv import BLOCK_TOKENS, ReplicaKv
from bench.sim.profiles import StepProfile
from bench.traces import TraceRequest
from gateway.routing.policies import RoundRobinPolicy

PROFILE = StepProfile(
    "test",
    fixed_s=0.01,
    prefill_token_s=1e-4,
    decode_row_s=1e-3,
    context_token_s=1e-6,
    prefill_pair_s=1e-9,
    token_budget=1024,
    max_running=8,
)
BIG_KV = 10**7


def request(arrival_s: float, blocks: list[int], output_tokens: int = 4) -> TraceRequest:
    return TraceRequest(arrival_s, len(blocks) * BLOCK_TOKENS, output_tokens, blocks)


def run(requests, num_replicas: int = 1, kv_tokens: int = BIG_KV):
    return simulate(requests, ClusterSpec(PROFILE, num_replicas, kv_tokens, 1.0), RoundRobinPolicy())


def test_a_lone_request_takes_one_step_per_budget_chunk_to_its_first_token():
    (ttft,) = run([request(0.0, [1, 2])]).ttft_s  # 1024 tokens, one full-budget step
    assert ttft == pytest.approx(PROFILE.step_s(1024, 0, 0, 1024 * 1024))
    (ttft,) = run([request(0.0, [1, 2, 3, 4])]).ttft_s  # 2048 tokens: two chunks, the second attends to both
    assert ttft == pytest.approx(PROFILE.step_s(1024, 0, 0, 1024 * 1024) + PROFILE.step_s(1024, 0, 0, 1024 * 2048))


def test_a_block_is_reused_only_after_the_step_that_computes_it():
    # Step 1 (the budget, 1024 tokens) computes blocks 1 and 2 of the first prompt; the second, arriving meanwhile,
    # is admitted in step 2 and finds them cached (the engine caches each full block after its step), but not block
    # 3, which the first prompt computes in that same step 2.
    overlapping = run([request(0.0, [1, 2, 3]), request(0.0, [1, 2, 3, 4])])
    assert overlapping.hit_rate == pytest.approx(2 / 7)
    after = run([request(0.0, [1, 2, 3]), request(10.0, [1, 2, 3, 4])])
    assert after.hit_rate == pytest.approx(3 / 7)


def test_decode_steps_slow_down_as_the_batch_grows():
    def late_ttft_s(num_decoding: int) -> float:
        decoding = [request(0.0, [i], output_tokens=200) for i in range(num_decoding)]
        return run([*decoding, request(0.5, [99])]).ttft_s[-1]

    # The late request waits for the decode step in progress, and shares its own step with the decode rows.
    assert late_ttft_s(8) > late_ttft_s(1)


def test_kv_pressure_evicts_the_cache_then_preempts_and_every_request_still_finishes():
    requests = [request(0.01 * i, [10 * i, 10 * i + 1], output_tokens=400) for i in range(8)]
    result = run(requests, kv_tokens=4 * BLOCK_TOKENS + 600)
    assert result.preemptions > 0
    assert len(result.ttft_s) == 8 and all(t > 0 for t in result.ttft_s)


def test_the_kv_keeps_referenced_blocks_and_evicts_cached_ones_least_recent_first():
    kv = ReplicaKv(3 * BLOCK_TOKENS)
    assert kv.acquire([1, 2], 0)
    kv.publish([1, 2], 0, 2)
    assert kv.matched_blocks([1, 2, 3]) == 2
    kv.release([1, 2])  # cached, unreferenced; 2 (the leaf) is the older
    assert kv.acquire([7, 8], 0)  # needs one block more than is free: evicts the leaf 2, keeps the root 1
    assert kv.matched_blocks([1, 2]) == 1
    assert not kv.acquire([20, 21, 22], 0)  # 7 and 8 are referenced: no room, nothing changed
    assert kv.matched_blocks([1]) == 1


def test_bounds_order_ceiling_opt_lru():
    requests = [request(float(i), [i % 7, 100 + i % 3, 200 + i]) for i in range(60)]
    ceiling, opt, lru = ceiling_hit_rate(requests), pooled_opt_hit_rate(requests, 8), pooled_lru_hit_rate(requests, 8)
    assert ceiling >= opt > lru


def test_time_scale_spreads_arrivals_in_proportion_to_the_utilisation():
    requests = [request(float(i), [i]) for i in range(10)]
    assert time_scale(requests, PROFILE, 2, 0.5) == pytest.approx(2 * time_scale(requests, PROFILE, 2, 1.0))
