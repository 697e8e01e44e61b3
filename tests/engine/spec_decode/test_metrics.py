from __future__ import annotations

import pytest
import torch
from prometheus_client import CollectorRegistry, generate_latest

from engine.spec_decode.metrics import SpecDecodeStats, metric_families
from engine.spec_decode.rejection_sampler import rejection_sample


def test_counts_drafts_tokens_and_acceptances_per_position() -> None:
    stats = SpecDecodeStats(num_speculative_tokens=3)
    stats.observe([3, 3, 2, 0], [3, 1, 0, 0])
    stats.observe([3], [2])
    assert stats.num_drafts_total == 4  # the sequence with no drafts is not a draft
    assert stats.num_draft_tokens_total == 11
    assert stats.num_accepted_tokens_total == 6
    assert stats.num_accepted_tokens_per_pos_total == [3, 2, 1]
    assert stats.acceptance_rate == pytest.approx(6 / 11)
    assert stats.mean_tokens_per_draft == pytest.approx(2.5)


def test_observes_the_rejection_samplers_output() -> None:
    drafts = torch.tensor([[1, 2], [3, 0]])
    target = torch.zeros(2, 3, 4)
    target[0, :, 1], target[0, 1, 2] = 1.0, 1.0  # row 0 accepts both drafts
    target[1, :, 0] = 1.0  # row 1 rejects its only draft
    output = rejection_sample(drafts, torch.tensor([2, 1]), target)
    stats = SpecDecodeStats(num_speculative_tokens=2)
    stats.observe([2, 1], output.num_accepted.tolist())
    assert stats.num_accepted_tokens_per_pos_total == [1, 1]


def test_snapshot_is_independent_of_later_updates() -> None:
    stats = SpecDecodeStats(num_speculative_tokens=2)
    stats.observe([2], [1])
    snapshot = stats.snapshot()
    stats.observe([2], [2])
    assert snapshot.num_accepted_tokens_per_pos_total == [1, 0]
    assert snapshot.num_accepted_tokens_total == 1


def test_rejects_inconsistent_counts() -> None:
    stats = SpecDecodeStats(num_speculative_tokens=2)
    with pytest.raises(ValueError, match="k=2"):
        stats.observe([3], [1])
    with pytest.raises(ValueError, match="k=2"):
        stats.observe([1], [2])
    with pytest.raises(ValueError, match="shape"):
        stats.observe([1, 1], [1])


class _Collector:
    def __init__(self, stats: SpecDecodeStats):
        self.stats = stats

    def describe(self):
        return []

    def collect(self):
        yield from metric_families(self.stats, "tiny")


def test_exports_vllm_names() -> None:
    stats = SpecDecodeStats(num_speculative_tokens=2)
    stats.observe([2, 2], [2, 0])
    registry = CollectorRegistry()
    registry.register(_Collector(stats))
    text = generate_latest(registry).decode()
    assert 'vllm:spec_decode_num_drafts_total{model_name="tiny"} 2.0' in text
    assert 'vllm:spec_decode_num_draft_tokens_total{model_name="tiny"} 4.0' in text
    assert 'vllm:spec_decode_num_accepted_tokens_total{model_name="tiny"} 2.0' in text
    assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="tiny",position="0"} 1.0' in text
    assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="tiny",position="1"} 1.0' in text
