"""`sluicegate bench engine --profile-step` measures every phase of constant-batch decode steps, eager and with the
forward under torch.compile (the comparison docs/benchmarks.md records)."""

import pytest

from bench.engine_profile import profile_steps
from engine.step_profile import PHASES


@pytest.mark.parametrize("compiled", [False, True])
def test_the_step_profile_times_every_phase(tiny_model_dir, compiled):
    rows = profile_steps(tiny_model_dir, num_steps=3, batch_sizes=(1, 2), compiled=compiled)
    assert [row["batch"] for row in rows] == [1, 2]
    for row in rows:
        assert row["steps"] == 3
        assert row["forward_ms"] > 0 and all(row[f"{phase}_ms"] >= 0 for phase in PHASES)
        assert 0 <= row["outside_forward_ms"] < row["total_ms"]
