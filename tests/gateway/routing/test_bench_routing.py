"""`sluicegate bench routing` runs end to end on a small slice of a real trace (part 1, the simulation)."""

from __future__ import annotations

import json

from bench import routing


def test_the_simulation_runs_and_reports_every_policy(capsys):
    assert routing.main(["--json", "--traces", "synthetic", "--replicas", "2", "--limit", "300"]) == 0
    output = json.loads(capsys.readouterr().out)
    (result,) = output["simulation"]
    rows = {row["policy"]: row for row in result["rows"]}
    assert set(rows) == {
        "ceiling", "pooled_lru", "round_robin", "least_loaded", "consistent_hash",
        "sglang_style", "prefix_affinity", "prefix_affinity_hist",
    }
    assert rows["prefix_affinity"]["hit_rate"] <= rows["ceiling"]["hit_rate"]
    assert rows["prefix_affinity"]["hit_rate"] > rows["round_robin"]["hit_rate"]
    assert sum(rows["round_robin"]["requests_per_replica"]) == 300
    assert set(result["goal"]) >= {"reaches_90pct_of_ceiling", "beats_sglang_hit_rate", "beats_sglang_balance"}


def test_a_missing_trace_folder_is_a_clear_error(tmp_path, capsys):
    assert routing.main(["--workloads", str(tmp_path), "--traces", "conversation"]) == 2
    assert "no trace at" in capsys.readouterr().err


def test_drop_fraction_replays_a_seeded_random_subset(capsys):
    def replayed(*extra: str) -> int:
        routing.main(["--json", "--traces", "synthetic", "--replicas", "2", "--limit", "200", *extra])
        (result,) = json.loads(capsys.readouterr().out)["simulation"]
        return result["num_requests"]

    assert replayed() == 200
    dropped = replayed("--drop-fraction", "0.5", "--seed", "1")
    assert 60 < dropped < 140 and dropped == replayed("--drop-fraction", "0.5", "--seed", "1")
