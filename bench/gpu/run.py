"""The prepared GPU benchmark (entry: bench/gpu/run.sh). Four sections, each guarded so one failure prints FAIL
and the rest still run, all within one time budget (the slot is 8 minutes):

  check   every Triton kernel vs its torch reference on fresh random inputs      (checks.py)
  timing  kernel timings vs the measured device-to-device copy bandwidth         (timings.py)
  equiv   greedy tokens of the GPU path (Triton, CUDA graphs) against the torch kernels, fp32  (equivalence.py)
  engine  Llama-3-8B shape, bf16, dummy weights, ShareGPT-like mix (child process) (engine_bench.py)

One table at the end; JSON in $OUT/bench_gpu.json (./bench_gpu_out/ when OUT is unset), rewritten after every row.
`--cpu-smoke` runs the same code on tiny shapes under TRITON_INTERPRET=1 (no GPU needed; numbers meaningless).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SECTIONS = ("check", "timing", "equiv", "engine")
# Of the budget; equiv (three small engines) runs untimed before the engine, which sizes its run to what is left.
CHECKS_SHARE, TIMINGS_SHARE = 0.30, 0.20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/gpu/run.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on CPU under TRITON_INTERPRET=1")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
    parser.add_argument("--budget-s", type=float, default=460.0, help="wall-clock budget for the whole run")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.budget_s
    sections = [s for s in args.sections.split(",") if s]
    if unknown := set(sections) - set(SECTIONS):
        parser.error(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    if args.cpu_smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported

    import torch

    from bench.gpu import checks, timings
    from bench.gpu.report import Row, new_report

    report = new_report()
    device = "cpu" if args.cpu_smoke else "cuda"
    report.meta.update({"device": _device_name(device), "torch": torch.__version__, "cpu_smoke": args.cpu_smoke})
    print(f"sluicegate GPU benchmark on {report.meta['device']} -> {report.out_dir}/bench_gpu.json", flush=True)
    if device == "cuda" and not torch.cuda.is_available():
        report.add(Row("setup", "CUDA device", "none visible", status="FAIL"))
        print(report.table())
        return 1
    ops = None
    try:
        from kernels.dispatch import get_attention_ops

        ops = get_attention_ops(device, backend="triton")
        report.meta["triton"] = __import__("triton").__version__
    except Exception as error:
        report.fail("setup", "load Triton kernels", error)

    # Time shares: compiles dominate the checks; the engine needs the most (start-up, warm-up, the run itself).
    start = time.monotonic()
    checks_stop = start + CHECKS_SHARE * args.budget_s
    timings_stop = checks_stop + TIMINGS_SHARE * args.budget_s
    peak_gbps = 0.0
    if "check" in sections and ops is not None:
        profile = _pick(checks, args.cpu_smoke)
        _section(report, "check", lambda: checks.run_checks(report, ops, profile, device, checks_stop))
    if "timing" in sections and ops is not None:
        profile = _pick(timings, args.cpu_smoke)
        peak_gbps = _section(report, "timing", lambda: timings.run_timings(report, ops, profile, device, timings_stop))
    if "equiv" in sections:
        from bench.gpu import equivalence

        profile = _pick(equivalence, args.cpu_smoke)
        _section(report, "equiv", lambda: equivalence.run_equivalence(report, profile, device))
    if "engine" in sections:
        _section(report, "engine", lambda: _engine(report, deadline, peak_gbps or 0.0, args.cpu_smoke))

    print("\n" + report.table(), flush=True)
    report.save()
    return 1 if any(r.status == "FAIL" for r in report.rows) else 0


def _pick(module, cpu_smoke: bool):
    return module.CPU_SMOKE if cpu_smoke else module.GPU


def _section(report, name: str, fn):
    print(f"[{name}]", flush=True)
    try:
        return fn()
    except Exception as error:
        report.fail(name, f"section {name}", error)
        return None


def _device_name(device: str) -> str:
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return "cpu (TRITON_INTERPRET=1)" if device == "cpu" else "no CUDA device"


def _engine(report, deadline: float, peak_gbps: float, cpu_smoke: bool) -> None:
    """The engine runs in a child process: its CUDA context, a hang or a crash cannot take the table with it."""
    from bench.gpu.report import Row

    budget_s = deadline - time.monotonic() - 5
    if budget_s < 30:
        report.add(Row("engine", "engine run", f"only {budget_s:.0f} s left", status="FAIL"))
        return
    rows_file = report.out_dir / "engine_rows.json"
    rows_file.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "bench.gpu.engine_bench",
        "--rows-file",
        str(rows_file),
        "--budget-s",
        str(budget_s - 10),
        "--peak-gbps",
        str(peak_gbps),
    ]
    if cpu_smoke:
        command.append("--cpu-smoke")
    report.out_dir.mkdir(parents=True, exist_ok=True)
    stderr_path = report.out_dir / "engine_stderr.log"
    # The child's stdout streams through (live progress); its stderr is kept for the FAIL row.
    with open(stderr_path, "w") as stderr:
        try:
            proc = subprocess.run(command, timeout=budget_s, stderr=stderr)
            failure = None if proc.returncode == 0 else f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            failure = f"timed out after {budget_s:.0f} s"
    if failure:
        failure += ": " + stderr_path.read_text(errors="replace").strip()[-300:]
    rows = json.loads(rows_file.read_text()) if rows_file.exists() else []
    for row in rows:
        report.add(Row("engine", **row), echo=False)  # the child printed it already
    if failure:
        report.add(Row("engine", "engine run", failure.replace("\n", " "), status="FAIL"))


if __name__ == "__main__":
    raise SystemExit(main())
