"""`sluicegate bench routing` runs end to end on a small slice of a shipped trace, and on a trace given by path."""

from __future__ import annotations

import json

from bench import routing

SMOKE = ["--json", "--limit", "300", "--replicas", "2", "--utilisation", "0.6", "--replays", "2"]


def test_the_simulation_reports_every_policy_the_bounds_and_the_goals(capsys):
    assert routing.main([*SMOKE, "--trace", "synthetic"]) == 0
    (cell,) = json.loads(capsys.readouterr().out)["simulation"]
    rows = {row["policy"]: row for row in cell["rows"]}
    assert set(rows) == set(routing.POLICIES)
    bounds = {name: b["mean"] for name, b in cell["bounds"].items()}
    assert bounds["ceiling"] >= bounds["pooled_opt"] >= bounds["pooled_lru"]
    for row in rows.values():
        assert row["hit_rate"]["mean"] <= bounds["ceiling"] + 1e-9
        assert 0 < row["ttft_p50_s"]["mean"] <= row["ttft_p90_s"]["mean"] <= row["ttft_p99_s"]["mean"]
    assert rows["expected_ttft"]["hit_rate"]["mean"] > rows["round_robin"]["hit_rate"]["mean"]
    assert {"ttft_p50_s", "ttft_p99_s", "cache"} <= set(cell["goal"])


def test_a_trace_given_by_path_is_replayed(tmp_path, capsys):
    path = tmp_path / "mine.jsonl"
    lines = [
        {"timestamp": 100 * i, "input_length": 1500, "output_length": 20, "hash_ids": [i % 5, 10 + i % 5, 100 + i]}
        for i in range(60)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert routing.main([*SMOKE, "--trace", str(path), "--policies", "round_robin,expected_ttft"]) == 0
    (cell,) = json.loads(capsys.readouterr().out)["simulation"]
    assert cell["trace"] == "mine.jsonl" and [row["policy"] for row in cell["rows"]] == ["round_robin", "expected_ttft"]


def test_a_missing_trace_is_a_clear_error(tmp_path, capsys):
    assert routing.main(["--trace", str(tmp_path / "none.jsonl")]) == 2
    assert "no trace at" in capsys.readouterr().err
