"""Rolling acceptance rates and the adaptive rule that turns speculation off when it stops paying, and back on.

Acceptance rate alpha: the probability that a draft token is accepted given that every draft before it was. One
verification of n drafts with a accepted tested min(a + 1, n) positions and a of them passed, so the estimate is
sum(passed) / sum(tested) (the maximum-likelihood estimate under independent positions), with exponential
forgetting so that it follows a request as its text turns more or less predictable. Dividing accepted by drafted
tokens instead (vLLM's "acceptance rate" metric) underestimates alpha, since positions after a rejection never count.

With k drafts a step emits on average E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha) tokens (k + 1 at alpha = 1).
It costs, relative to a step without speculation, under a roofline model of one target forward pass:

    forward_time(N tokens) ~ max(1, N / compute_bound_tokens)       flat while reading weights dominates
    step_cost = (k * draft_cost_ratio * forward_time(B) + forward_time(B * (k+1) + P)) / forward_time(B + P)
                + overhead_ratio
    speedup   = E(alpha, k) / step_cost

for B decoding sequences and P prefill tokens in the step. Small batches are memory-bound, so verifying k + 1
positions costs about as much as one and speculation pays whenever alpha is not tiny; once B * (k+1) passes
compute_bound_tokens every verified position costs real compute and only a high alpha still pays.

Decisions, once per step: a global switch from the global alpha (off: no drafting at all, the draft model idles)
and one switch per request from its own alpha; a request speculates when both are on (and every request does
during a global probe). Each switch has hysteresis
(off below disable_speedup, on again at enable_speedup or above, so noise near the break-even does not flap it)
and, while off, speculates one step in every probe_interval_steps: alpha is only measured while speculating, so
without probes a switch that went off on a bad patch could never learn that the text turned predictable again. A
switch also comes back on without a probe when the batch shrinks enough that the same alpha pays again.

Seeded requests: speculation consumes a request's generator differently from plain sampling (both exact, but not the
same draws), so a seeded request reproduces only if it speculates in the same steps each time. These decisions depend
on the other requests, so give seeded requests a fixed choice (always or never) rather than this controller's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


def expected_tokens_per_step(alpha: float, num_speculative_tokens: int) -> float:
    """E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha): accepted drafts plus the one recovered or bonus token."""
    if alpha >= 1.0:
        return num_speculative_tokens + 1.0
    return (1.0 - alpha ** (num_speculative_tokens + 1)) / (1.0 - alpha)


@dataclass(frozen=True)
class SpecCostModel:
    draft_cost_ratio: float = 0.0
    """Time of one draft-model forward pass relative to one target decode pass at the same batch (0 for n-gram)."""
    compute_bound_tokens: int = 256
    """Tokens per target forward pass above which its time grows linearly (the roofline's ridge for this model
    and GPU; measure it with `sluicegate bench engine`)."""
    overhead_ratio: float = 0.02
    """Fixed cost of a speculative step (proposing, rejection sampling, bookkeeping), relative to a plain step."""

    def __post_init__(self) -> None:
        if self.draft_cost_ratio < 0.0:
            raise ValueError(f"draft_cost_ratio={self.draft_cost_ratio}: must be >= 0")
        if self.compute_bound_tokens < 1:
            raise ValueError(f"compute_bound_tokens={self.compute_bound_tokens}: must be at least 1")
        if self.overhead_ratio < 0.0:
            raise ValueError(f"overhead_ratio={self.overhead_ratio}: must be >= 0")

    def step_cost(self, batch_size: int, num_speculative_tokens: int, num_prefill_tokens: int = 0) -> float:
        """Time of a speculative step relative to the same step without speculation."""
        plain = self._forward_time(batch_size + num_prefill_tokens)
        drafting = num_speculative_tokens * self.draft_cost_ratio * self._forward_time(batch_size)
        verifying = self._forward_time(batch_size * (num_speculative_tokens + 1) + num_prefill_tokens)
        return (drafting + verifying) / plain + self.overhead_ratio

    def speedup(self, alpha: float, batch_size: int, num_speculative_tokens: int, num_prefill_tokens: int = 0) -> float:
        """Predicted tokens per unit time with speculation over without."""
        cost = self.step_cost(batch_size, num_speculative_tokens, num_prefill_tokens)
        return expected_tokens_per_step(alpha, num_speculative_tokens) / cost

    def _forward_time(self, num_tokens: int) -> float:
        return max(1.0, num_tokens / self.compute_bound_tokens)


@dataclass(frozen=True)
class AdaptiveConfig:
    num_speculative_tokens: int = 4
    """k: draft tokens per speculating sequence per step."""
    cost: SpecCostModel = field(default_factory=SpecCostModel)
    enable_speedup: float = 1.10
    """A switch that is off turns on when the predicted speedup reaches this."""
    disable_speedup: float = 1.0
    """A switch that is on turns off when the predicted speedup falls below this."""
    request_decay: float = 0.8
    """Forgetting factor per verification for a request's alpha (about the last 1 / (1 - decay) steps count)."""
    global_decay: float = 0.99
    """Forgetting factor per verification (of any request) for the global alpha."""
    prior_alpha: float = 0.6
    """alpha assumed before any verification; new requests start from the global alpha instead once it exists."""
    prior_weight: float = 2.0
    """How many tested positions the prior counts as, so the first few verifications move alpha but not wildly."""
    probe_interval_steps: int = 32
    """While a switch is off, speculate one step in this many to re-measure alpha."""

    def __post_init__(self) -> None:
        if self.num_speculative_tokens < 1:
            raise ValueError(f"num_speculative_tokens={self.num_speculative_tokens}: must be at least 1")
        if self.enable_speedup < self.disable_speedup:
            raise ValueError(
                f"enable_speedup={self.enable_speedup} is below disable_speedup={self.disable_speedup}: "
                "the on threshold must be at least the off threshold (their gap is the hysteresis)"
            )
        for name in ("request_decay", "global_decay"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise ValueError(f"{name}={getattr(self, name)}: must be in (0, 1)")
        if not 0.0 <= self.prior_alpha <= 1.0:
            raise ValueError(f"prior_alpha={self.prior_alpha}: must be in [0, 1]")
        if self.prior_weight <= 0.0:
            raise ValueError(f"prior_weight={self.prior_weight}: must be > 0")
        if self.probe_interval_steps < 1:
            raise ValueError(f"probe_interval_steps={self.probe_interval_steps}: must be at least 1")


class AcceptanceRate:
    """Exponentially forgetting estimate of alpha from (num_draft_tokens, num_accepted) per verification."""

    def __init__(self, decay: float, prior_alpha: float, prior_weight: float):
        self.decay = decay
        self.passed = prior_alpha * prior_weight
        self.tested = prior_weight

    def record(self, num_draft_tokens: int, num_accepted: int) -> None:
        if num_draft_tokens <= 0:
            return  # nothing was proposed, nothing was learnt
        self.passed = self.decay * self.passed + num_accepted
        self.tested = self.decay * self.tested + min(num_accepted + 1, num_draft_tokens)

    @property
    def alpha(self) -> float:
        return self.passed / self.tested


@dataclass
class _Switch:
    """On/off with hysteresis and periodic probes while off."""

    on: bool = True
    steps_off: int = 0

    def decide(self, speedup: float, config: AdaptiveConfig) -> bool:
        if self.on and speedup < config.disable_speedup:
            self.on, self.steps_off = False, 0
        elif not self.on and speedup >= config.enable_speedup:
            self.on = True
        if self.on:
            return True
        self.steps_off += 1
        return self.steps_off % config.probe_interval_steps == 0


class SpecDecodeController:
    """Per-step decisions for the engine: call decide() when building a step, record() after verifying it, and
    finish() when a request ends."""

    def __init__(self, config: AdaptiveConfig):
        self.config = config
        self.global_rate = AcceptanceRate(config.global_decay, config.prior_alpha, config.prior_weight)
        self._global_switch = _Switch()
        self._request_rates: dict[str, AcceptanceRate] = {}
        self._request_switches: dict[str, _Switch] = {}

    @property
    def globally_enabled(self) -> bool:
        """The global switch's state (probes aside)."""
        return self._global_switch.on

    def decide(self, request_ids: Sequence[str], num_prefill_tokens: int = 0) -> list[bool]:
        """Which of this step's decoding sequences should draft and verify; len(request_ids) is the batch size B."""
        batch_size = len(request_ids)
        if batch_size == 0:
            return []
        k, cost = self.config.num_speculative_tokens, self.config.cost
        global_speedup = cost.speedup(self.global_rate.alpha, batch_size, k, num_prefill_tokens)
        if not self._global_switch.decide(global_speedup, self.config):
            return [False] * batch_size
        if not self._global_switch.on:
            # A global probe measures every request; waiting for each request's own probe as well would make the
            # effective probe interval the square of probe_interval_steps.
            return [True] * batch_size
        decisions = []
        for request_id in request_ids:
            speedup = cost.speedup(self._rate(request_id).alpha, batch_size, k, num_prefill_tokens)
            decisions.append(self._request_switches[request_id].decide(speedup, self.config))
        return decisions

    def record(self, request_id: str, num_draft_tokens: int, num_accepted: int) -> None:
        """One verification's result for one sequence."""
        self._rate(request_id).record(num_draft_tokens, num_accepted)
        self.global_rate.record(num_draft_tokens, num_accepted)

    def finish(self, request_id: str) -> None:
        self._request_rates.pop(request_id, None)
        self._request_switches.pop(request_id, None)

    def request_alpha(self, request_id: str) -> float:
        """The request's alpha; the global one for a request not seen (or already finished)."""
        rate = self._request_rates.get(request_id)
        return (rate or self.global_rate).alpha

    def _rate(self, request_id: str) -> AcceptanceRate:
        rate = self._request_rates.get(request_id)
        if rate is None:
            # a new request starts from what the others achieve, not from a fixed guess
            rate = AcceptanceRate(self.config.request_decay, self.global_rate.alpha, self.config.prior_weight)
            self._request_rates[request_id] = rate
            self._request_switches[request_id] = _Switch()
        return rate
