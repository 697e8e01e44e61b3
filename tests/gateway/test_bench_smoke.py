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
