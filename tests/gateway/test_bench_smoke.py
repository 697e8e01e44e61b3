"""`sluicegate bench gateway` runs end to end on a minimal size (the numbers themselves are the benchmark's job)."""

from __future__ import annotations

import json
import os

from bench import gateway as bench


def test_bench_gateway_runs(tokenizer_dir, capsys):
    cores = os.sched_getaffinity(0)
    argv = [
        "--json",
        "--seconds",
        "0.3",
        "--count",
        "10",
        "--connections",
        "4",
        "--skip-litellm",
        "--tokenizer",
        tokenizer_dir,
    ]
    assert bench.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in report["results"]] == ["direct", "bare", "sluicegate"]
    assert all(r["rps"] > 0 and r["errors"] == 0 for r in report["results"])
    assert report["results"][2]["cpu_ms_per_req"] > 0
    assert report["notes"] == ["litellm: skipped (--skip-litellm)"]
    assert os.sched_getaffinity(0) == cores  # the benchmark gave the test process its cores back


def test_bench_gateway_guardrail_columns_run(tokenizer_dir, capsys):
    """--guardrails: the injection check before the upstream request and alongside it, every request allowed (the
    benchmark's prompts are ordinary ones)."""
    argv = ["--json", "--seconds", "0.3", "--count", "6", "--connections", "2", "--skip-litellm", "--guardrails"]
    argv += ["--upstream-ms", "20", "--tokenizer", tokenizer_dir]
    assert bench.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    columns = {r["name"]: r for r in report["results"]}
    assert list(columns) == ["direct", "bare", "sluicegate", "sg-inject", "sg-along"]
    assert all(r["errors"] == 0 for r in report["results"])
    assert columns["direct"]["p50_ms"] >= 20  # the upstream waits --upstream-ms before it answers
