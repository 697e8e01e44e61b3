"""Speculative-decoding counters with vLLM's metric names, so its dashboards read our replicas unchanged.

    vllm:spec_decode_num_drafts                  verifications that had at least one draft token
    vllm:spec_decode_num_draft_tokens            draft tokens proposed
    vllm:spec_decode_num_accepted_tokens         draft tokens accepted
    vllm:spec_decode_num_accepted_tokens_per_pos draft tokens accepted at each draft position (label `position`)

All are counters, exported with the `_total` suffix and a `model_name` label, like engine/server/metrics.py's. The
engine thread owns a SpecDecodeStats and updates it after each verification; the server's scrape-time collector
yields `metric_families(stats, model_name)` from the latest published copy.

Derived rates a dashboard computes: acceptance rate = accepted / draft tokens; mean tokens per verification =
1 + accepted / drafts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from prometheus_client.core import CounterMetricFamily

NUM_DRAFTS = "vllm:spec_decode_num_drafts"
NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
NUM_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
NUM_ACCEPTED_TOKENS_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


@dataclass
class SpecDecodeStats:
    num_speculative_tokens: int
    """k: the per-position counter has this many positions."""
    num_drafts_total: int = 0
    num_draft_tokens_total: int = 0
    num_accepted_tokens_total: int = 0
    num_accepted_tokens_per_pos_total: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.num_accepted_tokens_per_pos_total:
            self.num_accepted_tokens_per_pos_total = [0] * self.num_speculative_tokens

    def observe(self, num_draft_tokens: Sequence[int] | np.ndarray, num_accepted: Sequence[int] | np.ndarray) -> None:
        """One step's verification, one entry per sequence (rejection_sample's num_accepted, on the host)."""
        drafted = np.asarray(num_draft_tokens, dtype=np.int64)
        accepted = np.asarray(num_accepted, dtype=np.int64)
        if drafted.shape != accepted.shape:
            raise ValueError(f"num_draft_tokens has shape {drafted.shape} but num_accepted has {accepted.shape}")
        if drafted.size and (drafted.max() > self.num_speculative_tokens or (accepted > drafted).any()):
            raise ValueError(f"need num_accepted <= num_draft_tokens <= k={self.num_speculative_tokens}")
        self.num_drafts_total += int((drafted > 0).sum())
        self.num_draft_tokens_total += int(drafted.sum())
        self.num_accepted_tokens_total += int(accepted.sum())
        # position i was accepted in every sequence that accepted more than i drafts
        at_least = np.bincount(accepted, minlength=self.num_speculative_tokens + 1)[::-1].cumsum()[::-1]
        for position in range(self.num_speculative_tokens):
            self.num_accepted_tokens_per_pos_total[position] += int(at_least[position + 1])

    def snapshot(self) -> SpecDecodeStats:
        """A copy to publish to the server thread."""
        return replace(self, num_accepted_tokens_per_pos_total=list(self.num_accepted_tokens_per_pos_total))

    @property
    def acceptance_rate(self) -> float:
        """Accepted over proposed draft tokens (0 before any draft)."""
        return self.num_accepted_tokens_total / self.num_draft_tokens_total if self.num_draft_tokens_total else 0.0

    @property
    def mean_tokens_per_draft(self) -> float:
        """Tokens emitted per verification that had drafts: the accepted ones plus the recovered or bonus token."""
        return 1.0 + self.num_accepted_tokens_total / self.num_drafts_total if self.num_drafts_total else 0.0


def metric_families(stats: SpecDecodeStats, model_name: str) -> Iterator[CounterMetricFamily]:
    """Prometheus families for a scrape-time collector."""
    for name, value, help_text in (
        (NUM_DRAFTS, stats.num_drafts_total, "Number of spec decoding drafts."),
        (NUM_DRAFT_TOKENS, stats.num_draft_tokens_total, "Number of draft tokens."),
        (NUM_ACCEPTED_TOKENS, stats.num_accepted_tokens_total, "Number of accepted tokens."),
    ):
        family = CounterMetricFamily(name, help_text, labels=["model_name"])
        family.add_metric([model_name], float(value))
        yield family
    per_pos = CounterMetricFamily(
        NUM_ACCEPTED_TOKENS_PER_POS, "Accepted tokens per draft position.", labels=["model_name", "position"]
    )
    for position, value in enumerate(stats.num_accepted_tokens_per_pos_total):
        per_pos.add_metric([model_name, str(position)], float(value))
    yield per_pos
