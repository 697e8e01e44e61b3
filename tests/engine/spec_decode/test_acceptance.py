"""The adaptive rule on synthetic acceptance streams: each position accepted independently with probability alpha."""

from __future__ import annotations

import random

import pytest

from engine.spec_decode.acceptance import (
    AcceptanceRate,
    AdaptiveConfig,
    SpecCostModel,
    SpecDecodeController,
    expected_tokens_per_step,
)

K = 4


def _num_accepted(alpha: float, k: int, rng: random.Random) -> int:
    accepted = 0
    while accepted < k and rng.random() < alpha:
        accepted += 1
    return accepted


def _step(controller: SpecDecodeController, alphas: dict[str, float], rng: random.Random, prefill: int = 0) -> dict:
    """One engine step: decide, then verify the speculating requests at their true alpha."""
    decisions = dict(zip(alphas, controller.decide(list(alphas), prefill), strict=True))
    for request_id, speculate in decisions.items():
        if speculate:
            controller.record(request_id, K, _num_accepted(alphas[request_id], K, rng))
    return decisions


def _config(**kwargs) -> AdaptiveConfig:
    return AdaptiveConfig(num_speculative_tokens=K, **kwargs)


def test_expected_tokens_per_step() -> None:
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert expected_tokens_per_step(0.5, 2) == pytest.approx(1.75)
    assert expected_tokens_per_step(0.999999, 4) == pytest.approx(5.0, rel=1e-5)


def test_cost_model_is_flat_while_memory_bound_and_linear_beyond() -> None:
    ngram = SpecCostModel(draft_cost_ratio=0.0, compute_bound_tokens=256, overhead_ratio=0.02)
    assert ngram.step_cost(batch_size=1, num_speculative_tokens=4) == pytest.approx(1.02)
    assert ngram.step_cost(batch_size=512, num_speculative_tokens=4) == pytest.approx(5.02)  # 2560 / 512 tokens
    draft = SpecCostModel(draft_cost_ratio=0.1, compute_bound_tokens=256, overhead_ratio=0.0)
    assert draft.step_cost(batch_size=8, num_speculative_tokens=4) == pytest.approx(1.4)
    # prefill tokens already make the step compute-bound, so verification tokens cost their share
    assert ngram.step_cost(1, 4, num_prefill_tokens=1024) == pytest.approx(1029 / 1025 + 0.02)


def test_acceptance_rate_estimates_per_position_alpha() -> None:
    rng = random.Random(0)
    rate = AcceptanceRate(decay=0.999, prior_alpha=0.5, prior_weight=1.0)
    accepted = drafted = 0
    for _ in range(5000):
        num_accepted = _num_accepted(0.7, K, rng)
        rate.record(K, num_accepted)
        accepted, drafted = accepted + num_accepted, drafted + K
    assert rate.alpha == pytest.approx(0.7, abs=0.03)
    assert accepted / drafted < 0.55  # the naive ratio is biased low, which is why it is not used


def test_a_step_without_drafts_teaches_nothing() -> None:
    rate = AcceptanceRate(decay=0.5, prior_alpha=0.3, prior_weight=2.0)
    rate.record(0, 0)
    assert rate.alpha == pytest.approx(0.3)


def test_request_turns_off_when_acceptance_collapses_and_back_on_after_probes() -> None:
    rng = random.Random(1)
    controller = SpecDecodeController(_config(probe_interval_steps=10, cost=SpecCostModel(draft_cost_ratio=0.3)))
    alphas = {"a": 0.9}
    assert all(_step(controller, alphas, rng)["a"] for _ in range(20))

    alphas["a"] = 0.05
    history = [_step(controller, alphas, rng)["a"] for _ in range(100)]
    first_off = history.index(False)
    assert first_off < 10
    # once off, it speculates exactly once every probe_interval_steps (global and request switch both probe)
    probes = [i for i, speculated in enumerate(history) if speculated and i > first_off]
    assert probes and all(b - a == 10 for a, b in zip(probes, probes[1:], strict=False))

    alphas["a"] = 0.9
    history = [_step(controller, alphas, rng)["a"] for _ in range(60)]
    assert history[-20:] == [True] * 20  # back on for good after a probe or two
    assert not all(history[:5])


def test_large_batches_turn_speculation_off_globally_and_small_ones_back_on() -> None:
    rng = random.Random(2)
    config = _config(cost=SpecCostModel(draft_cost_ratio=0.0, compute_bound_tokens=64), probe_interval_steps=1000)
    controller = SpecDecodeController(config)
    small = {f"r{i}": 0.6 for i in range(4)}
    large = {f"r{i}": 0.6 for i in range(128)}
    for _ in range(10):
        assert all(_step(controller, small, rng).values())
    assert not any(_step(controller, large, rng).values())  # 128 * 5 tokens: five times the cost for E ~ 2.2
    assert not controller.globally_enabled
    assert all(_step(controller, small, rng).values())  # the same alpha pays again at B=4, no probe needed
    assert controller.globally_enabled


def test_hysteresis_holds_the_state_between_the_thresholds() -> None:
    # n-gram costs, k=4, B=1: speedup = E(alpha) / 1.02. alpha = 1/15 gives about 1.05, inside [1.0, 1.1).
    cost = SpecCostModel()
    config = _config(cost=cost, probe_interval_steps=1000, request_decay=0.99, global_decay=0.99)
    assert 1.0 <= cost.speedup(1 / 15, 1, K) < 1.1
    for start_accepted, expected in ((K, True), (0, False)):
        controller = SpecDecodeController(config)
        for _ in range(100):  # settle far on one side: every draft accepted, or none
            controller.decide(["a"])
            controller.record("a", K, start_accepted)
        for _ in range(200):  # then hover near break-even: 1 passed in 15 tested positions per cycle
            controller.decide(["a"])
            controller.record("a", K, 1)
            for _ in range(13):
                controller.record("a", K, 0)
        assert 1.0 <= cost.speedup(controller.request_alpha("a"), 1, K) < 1.1
        assert controller.decide(["a"]) == [expected]


def test_each_request_is_judged_on_its_own_acceptance() -> None:
    rng = random.Random(3)
    controller = SpecDecodeController(_config(cost=SpecCostModel(draft_cost_ratio=0.2), probe_interval_steps=1000))
    alphas = {"copy": 0.95, "creative": 0.02}
    for _ in range(30):
        decisions = _step(controller, alphas, rng)
    assert decisions == {"copy": True, "creative": False}
    assert controller.globally_enabled
    assert controller.request_alpha("copy") > 0.8
    # the creative request's estimate froze when it went off, low enough that drafting cost more than it gave
    assert controller.config.cost.speedup(controller.request_alpha("creative"), 2, K) < 1.0


def test_new_requests_start_from_the_global_alpha_and_finish_forgets() -> None:
    rng = random.Random(4)
    controller = SpecDecodeController(_config())
    for _ in range(300):
        _step(controller, {"old": 0.9}, rng)
    assert controller.request_alpha("new") == pytest.approx(controller.global_rate.alpha)
    controller.record("gone", K, 0)
    controller.finish("gone")
    assert controller.request_alpha("gone") == pytest.approx(controller.global_rate.alpha)
    assert controller.decide([]) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_speculative_tokens": 0}, "num_speculative_tokens=0"),
        ({"enable_speedup": 0.9, "disable_speedup": 1.0}, "hysteresis"),
        ({"request_decay": 1.0}, "request_decay"),
        ({"prior_alpha": 1.5}, "prior_alpha"),
        ({"probe_interval_steps": 0}, "probe_interval_steps"),
    ],
)
def test_config_errors_name_the_value(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AdaptiveConfig(**kwargs)


def test_cost_model_errors_name_the_value() -> None:
    with pytest.raises(ValueError, match="compute_bound_tokens=0"):
        SpecCostModel(compute_bound_tokens=0)
