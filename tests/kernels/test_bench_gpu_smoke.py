"""The prepared GPU benchmark's kernel-check section runs end to end on CPU (tiny shapes, interpreter), so the
script cannot rot between the rare runs on a real card."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # subprocesses run modules by name from here


def test_bench_gpu_cpu_smoke_checks_pass(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path)}
    command = [sys.executable, "-m", "bench.gpu.run", "--cpu-smoke", "--sections", "check"]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    body = json.loads((tmp_path / "bench_gpu.json").read_text())
    rows = body["rows"]
    assert len(rows) >= 16 and all(r["status"] == "PASS" for r in rows), rows
    assert any("2**31" in r["item"] for r in rows) and any("split-K" in r["item"] for r in rows)
    assert "rows, 0 FAIL" in proc.stdout


def test_bench_gpu_cpu_smoke_equivalence_takes_every_path_and_matches(tmp_path):
    """The equivalence section (the GPU path's greedy tokens against the torch kernels') runs on CPU with the
    interpreted kernels: prefix hits, preemptions and chunked steps all happen, and the tokens agree."""
    env = {**os.environ, "OUT": str(tmp_path)}
    command = [sys.executable, "-m", "bench.gpu.run", "--cpu-smoke", "--sections", "equiv"]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads((tmp_path / "bench_gpu.json").read_text())["rows"]
    assert [r["status"] for r in rows] == ["PASS", "PASS"], rows
    assert rows[1]["value"] == "6/6 identical"


def test_bench_gpu_cpu_smoke_engine_section_runs(tmp_path):
    """The engine section end to end on the tiny model, its comparison of async output processing off and on
    included: the rows a GPU slot will print, none failing."""
    env = {**os.environ, "OUT": str(tmp_path)}
    command = [sys.executable, "-m", "bench.gpu.run", "--cpu-smoke", "--sections", "engine"]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads((tmp_path / "bench_gpu.json").read_text())["rows"]
    assert all(r["status"] != "FAIL" for r in rows), rows
    overlap = [r for r in rows if r["item"].startswith("output throughput, outputs processed during the next step")]
    assert len(overlap) == 1 and overlap[0]["versus"].endswith("x"), rows
