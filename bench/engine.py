"""`sluicegate bench engine`: our engine vs transformers on the same model, prompts and output lengths.

Systems (each in its own subprocess, so peak memory is its own):
  ours        engine.LLM: paged KV cache, continuous batching, chunked prefill
  ours-invariant  the same with `batch_invariant` (not in the default set): what bit-identical outputs cost
  ours-async  the same with `async_output_processing` (not in the default set; on by default on CUDA only): what
              building a step's outputs after launching the next step does on this machine
  hf-cb       transformers' continuous batching (ContinuousBatchingManager, paged attention), per-request lengths
  hf-padded   transformers' padded batched generate(): batches of --padded-batch-size in arrival order, each run to
              its longest request (the tokens past a request's own length are wasted, which is the point)
Workloads (EOS ignored, so every system makes the same tokens):
  pareto      (default) heavy-tailed (Pareto) prompt and output lengths; each system in its own subprocess
  long-tail   few requests (64, all arriving at once), prompts of 16-200 tokens, Pareto output lengths capped at 256
              (mean ~73): most steps run few sequences, so per-step overhead decides. Every system runs in one
              subprocess, one after the other, each after a short warm-up.
--busy-neighbour runs a busy-looping process beside the benchmark (the local stack's normal case: `sluicegate up`
runs two replicas and a gateway on one machine); --profile-step times the engine's step phases instead
(bench/engine_profile.py); --structured, a JSON-schema grammar's cost per step (bench/engine_structured.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DEFAULT_MODEL_DIR = Path(".sluicegate/models/small")
SYSTEMS = ("ours", "hf-cb", "hf-padded")


def pareto_lengths(rng: np.random.Generator, n: int, mean: float, alpha: float, lo: int, hi: int) -> list[int]:
    """Pareto(alpha) with scale chosen so the untruncated mean is `mean`, clipped to [lo, hi]."""
    scale = mean * (alpha - 1) / alpha
    return np.clip((scale * (1 + rng.pareto(alpha, n))).astype(int), lo, hi).tolist()


def make_workload(num_requests: int, vocab_size: int, seed: int, prompt_mean: float, output_mean: float) -> dict:
    rng = np.random.default_rng(seed)
    prompt_lens = pareto_lengths(rng, num_requests, prompt_mean, 1.8, 4, 1024)
    output_lens = pareto_lengths(rng, num_requests, output_mean, 1.8, 1, 1024)
    prompts = [rng.integers(5, vocab_size, size=n).tolist() for n in prompt_lens]
    return {"prompts": prompts, "output_lens": output_lens}


def make_long_tail_workload(num_requests: int, vocab_size: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    prompt_lens = rng.integers(16, 201, size=num_requests).tolist()
    # Pareto(1.5) with an untruncated mean of 90, capped at 256: a mean of ~73 with a few long ones.
    output_lens = pareto_lengths(rng, num_requests, 90.0, 1.5, 1, 256)
    prompts = [rng.integers(5, vocab_size, size=n).tolist() for n in prompt_lens]
    return {"prompts": prompts, "output_lens": output_lens}


WARMUP = {"prompts": [list(range(5, 21))], "output_lens": [4]}  # one short request: lazy init outside the timing


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_ours(model_dir: str, work: dict, args, **engine_kwargs) -> dict:
    from engine import LLM, SamplingParams

    llm = LLM(
        model_dir,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        **engine_kwargs,
    )
    engine = llm.engine
    start = time.perf_counter()
    for i, (prompt, n) in enumerate(zip(work["prompts"], work["output_lens"])):
        engine.add_request(str(i), prompt, SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True))
    first_token: dict[str, float] = {}
    last_token: dict[str, float] = {}
    itl: list[float] = []
    produced = 0
    while engine.has_unfinished_requests():
        outs = engine.step()
        now = time.perf_counter()
        for out in outs:
            new = len(out.outputs[0].delta_token_ids)
            if not new:
                continue
            produced += new
            rid = out.request_id
            if rid not in first_token:
                first_token[rid] = now - start
            else:
                itl.append(now - last_token[rid])
            last_token[rid] = now
    elapsed = time.perf_counter() - start
    return {"elapsed_s": elapsed, "output_tokens": produced, "ttft_s": list(first_token.values()), "itl_s": itl}


def _hf_model(model_dir: str):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.generation_config.eos_token_id = None
    return model


def run_hf_padded(model_dir: str, work: dict, args) -> dict:
    import torch

    model = _hf_model(model_dir)
    prompts, lens = work["prompts"], work["output_lens"]
    batch = args.padded_batch_size
    start = time.perf_counter()
    useful = 0
    with torch.inference_mode():
        for b in range(0, len(prompts), batch):
            chunk, chunk_lens = prompts[b : b + batch], lens[b : b + batch]
            width = max(len(p) for p in chunk)
            ids = torch.tensor([[0] * (width - len(p)) + p for p in chunk])  # left padding
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
            model.generate(
                ids, attention_mask=mask, max_new_tokens=max(chunk_lens), min_new_tokens=max(chunk_lens),
                do_sample=False, pad_token_id=0,
            )  # fmt: skip
            useful += sum(chunk_lens)
    return {"elapsed_s": time.perf_counter() - start, "output_tokens": useful, "ttft_s": [], "itl_s": []}


def run_hf_cb(model_dir: str, work: dict, args) -> dict:
    from transformers import GenerationConfig

    model = _hf_model(model_dir)
    gen_config = GenerationConfig(do_sample=False, eos_token_id=None, pad_token_id=0, max_new_tokens=1024)
    produced = 0
    start = time.perf_counter()
    with model.continuous_batching_context_manager(generation_config=gen_config, block=True, timeout=5) as manager:
        ids = [
            manager.add_request(p, request_id=str(i), max_new_tokens=n)
            for i, (p, n) in enumerate(zip(work["prompts"], work["output_lens"]))
        ]
        done = 0
        while done < len(ids):
            result = manager.get_result(timeout=5)
            if result is None:
                if not manager.is_running():
                    raise RuntimeError("transformers continuous batching stopped (its thread died)")
                continue
            if result.is_finished():
                done += 1
                produced += len(result.generated_tokens)
    return {"elapsed_s": time.perf_counter() - start, "output_tokens": produced, "ttft_s": [], "itl_s": []}


def run_ours_invariant(model_dir: str, work: dict, args) -> dict:
    return run_ours(model_dir, work, args, batch_invariant=True)


def run_ours_async(model_dir: str, work: dict, args) -> dict:
    return run_ours(model_dir, work, args, async_output_processing=True)


RUNNERS = {
    "ours": run_ours,
    "ours-invariant": run_ours_invariant,
    "ours-async": run_ours_async,
    "hf-padded": run_hf_padded,
    "hf-cb": run_hf_cb,
}


def _worker(args) -> int:
    import torch

    work = json.loads(Path(args.workload_file).read_text())
    systems = args.worker.split(",")
    for system in systems:
        if len(systems) > 1:  # one process for all: each system's lazy initialisation stays out of its timing
            torch.set_num_threads(args.threads)
            RUNNERS[system](args.model, WARMUP, args)
        # The same for every system at its start (ours may lower it while a neighbour is busy: engine/cpu_threads.py).
        torch.set_num_threads(args.threads)
        result = RUNNERS[system](args.model, work, args)
        result["peak_rss_mib"] = _peak_rss_mib()  # the process's peak so far: only the first system's is its own
        print(f"RESULT {system} " + json.dumps(result), flush=True)
    return 0


def _run_systems(systems: list[str], workload_path: str, args) -> dict[str, dict]:
    """Run `systems` in one worker subprocess; their results by name (an error for those that gave none)."""
    cmd = [sys.executable, "-m", "bench.engine", "--worker", ",".join(systems), "--workload-file", workload_path]
    cmd += ["--model", args.model, "--threads", str(args.threads), "--padded-batch-size", str(args.padded_batch_size)]
    cmd += ["--max-num-seqs", str(args.max_num_seqs), "--max-num-batched-tokens", str(args.max_num_batched_tokens)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, env=_worker_env(args))
        stdout, error = proc.stdout, (proc.stderr.strip().splitlines() or ["no output"])[-1]
    except subprocess.TimeoutExpired as exc:  # keep what the systems that did finish printed
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        error = f"timed out after {args.timeout_s:g} s"
    results = {}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            system, payload = line[len("RESULT ") :].split(" ", 1)
            results[system] = json.loads(payload)
    return {s: results.get(s, {"error": error}) for s in systems}


def _worker_env(args) -> dict[str, str]:
    env = dict(os.environ)
    if args.omp_wait_policy:  # read by the OpenMP runtime when torch loads, so it goes in before the process starts
        env["OMP_WAIT_POLICY"] = args.omp_wait_policy
    return env


@contextlib.contextmanager
def busy_neighbour(enabled: bool):
    """A process that keeps one core busy while the benchmark runs (stopped by its own pid afterwards)."""
    if not enabled:
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summarize(system: str, r: dict) -> dict:
    if "error" in r:
        return {"system": system, "error": r["error"]}
    return {
        "system": system,
        "output_tok_s": r["output_tokens"] / r["elapsed_s"],
        "elapsed_s": r["elapsed_s"],
        "output_tokens": r["output_tokens"],
        "ttft_p50_s": _pct(r["ttft_s"], 50),
        "ttft_p99_s": _pct(r["ttft_s"], 99),
        "itl_p50_s": _pct(r["itl_s"], 50),
        "itl_p99_s": _pct(r["itl_s"], 99),
        "peak_rss_mib": r["peak_rss_mib"],
    }


def _fmt(v, unit: str = "") -> str:
    if v is None:
        return "-"
    if unit == "ms":
        return f"{v * 1000:.1f}"
    return f"{v:,.1f}" if isinstance(v, float) else str(v)


def print_table(rows: list[dict], meta: dict) -> None:
    notes = f"{meta['workload']} workload" + (", busy neighbour" if meta["busy_neighbour"] else "")
    notes += f", OMP_WAIT_POLICY={meta['omp_wait_policy']}" if meta["omp_wait_policy"] else ""
    print(
        f"bench engine ({notes}): {meta['num_requests']} requests, prompt mean {meta['prompt_mean']:.0f} (max {meta['prompt_max']}),"
        f" output mean {meta['output_mean']:.0f} (max {meta['output_max']}) tokens, model {meta['model']}"
    )
    header = f"{'system':<14} {'out tok/s':>10} {'elapsed s':>10} {'TTFT p50 ms':>12} {'ITL p50 ms':>11} {'ITL p99 ms':>11} {'peak RSS MiB':>13} {'ours is':>9}"
    print(header)
    ours = next((r for r in rows if r["system"] == "ours" and "error" not in r), None)
    for r in rows:
        if "error" in r:
            print(f"{r['system']:<14} FAILED: {r['error']}")
            continue
        ratio = f"{ours['output_tok_s'] / r['output_tok_s']:.2f}x" if ours and r is not ours else "-"
        print(
            f"{r['system']:<14} {_fmt(r['output_tok_s']):>10} {_fmt(r['elapsed_s']):>10} {_fmt(r['ttft_p50_s'], 'ms'):>12}"
            f" {_fmt(r['itl_p50_s'], 'ms'):>11} {_fmt(r['itl_p99_s'], 'ms'):>11} {_fmt(r['peak_rss_mib']):>13} {ratio:>9}"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sluicegate bench engine", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--model", default=None, help="model folder (default: the small preset, made if missing)")
    parser.add_argument("--num-requests", type=int, default=200)
    parser.add_argument("--prompt-mean", type=float, default=120.0)
    parser.add_argument("--output-mean", type=float, default=150.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=int, default=1024)
    parser.add_argument("--padded-batch-size", type=int, default=32)
    parser.add_argument("--timeout-s", type=float, default=1800)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch CPU threads for every system")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--workload",
        choices=("pareto", "long-tail"),
        default="pareto",
        help="pareto: --num-requests with Pareto prompt and output lengths; long-tail: 64 requests "
        "at once, prompts 16-200, outputs Pareto capped at 256, all systems in one process",
    )
    parser.add_argument("--busy-neighbour", action="store_true", help="run a busy-looping process alongside")
    parser.add_argument(
        "--omp-wait-policy",
        choices=("PASSIVE", "ACTIVE"),
        default=None,
        help="OMP_WAIT_POLICY for the processes measured (default: the environment's)",
    )
    parser.add_argument(
        "--profile-step",
        action="store_true",
        help="time the engine's step phases at batch 1, 8, 64 instead (bench/engine_profile.py)",
    )
    parser.add_argument("--profile-steps", type=int, default=64, help="decode steps measured per batch size")
    parser.add_argument(
        "--compile", action="store_true", help="with --profile-step: the model's forward under torch.compile"
    )
    parser.add_argument(
        "--profile-timer",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: the engine thread's CPU time, which other jobs on the machine do not inflate",
    )
    parser.add_argument(
        "--spec", action="store_true", help="speculative decoding section instead (bench/engine_spec.py)"
    )
    parser.add_argument(
        "--structured",
        action="store_true",
        help="a JSON-schema grammar on every row vs none, ms per step at batch 1, 8, 64, --profile-steps steps "
        "instead (bench/engine_structured.py)",
    )
    parser.add_argument("--pair", default=".sluicegate/models/pair", help="trained target/draft pair (made if missing)")
    parser.add_argument("--spec-max-tokens", type=int, default=64)
    parser.add_argument("--num-speculative-tokens", type=int, default=4)
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # comma-separated systems, run in this process
    parser.add_argument("--workload-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if unknown := [s for s in args.systems.split(",") if s not in RUNNERS]:
        parser.error(f"--systems: unknown {', '.join(unknown)}; choose from {', '.join(RUNNERS)}")
    if args.worker:
        return _worker(args)
    if args.spec:
        return _spec_main(args)
    if args.model is None:
        args.model = str(DEFAULT_MODEL_DIR)
        if not (DEFAULT_MODEL_DIR / "config.json").exists():
            from engine.tiny_model import make_tiny_model

            make_tiny_model(DEFAULT_MODEL_DIR, preset="small")
    if args.profile_step:
        with busy_neighbour(args.busy_neighbour):
            return _profile_main(args)
    if args.structured:
        return _structured_main(args)
    vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"]
    if args.workload == "long-tail":
        work = make_long_tail_workload(64, vocab, args.seed)
    else:
        work = make_workload(args.num_requests, vocab, args.seed, args.prompt_mean, args.output_mean)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(work, f)
    systems = args.systems.split(",")
    try:
        with busy_neighbour(args.busy_neighbour):
            if args.workload == "long-tail":
                results = _run_systems(systems, f.name, args)
            else:
                results = {s: _run_systems([s], f.name, args)[s] for s in systems}
    finally:
        os.unlink(f.name)
    rows = [summarize(s, results[s]) for s in systems]
    plens, olens = [len(p) for p in work["prompts"]], work["output_lens"]
    meta = {
        "model": args.model, "num_requests": len(plens), "prompt_mean": float(np.mean(plens)),
        "prompt_max": max(plens), "output_mean": float(np.mean(olens)), "output_max": max(olens),
        "cpu_count": os.cpu_count(), "threads": args.threads, "date": time.strftime("%Y-%m-%d"),
        "workload": args.workload, "busy_neighbour": args.busy_neighbour, "omp_wait_policy": args.omp_wait_policy,
    }  # fmt: skip
    if args.json:
        print(json.dumps({"meta": meta, "results": rows}))
    else:
        print_table(rows, meta)
    return 0 if all("error" not in r for r in rows) else 1


def _profile_main(args) -> int:
    if args.omp_wait_policy:
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy  # before torch loads (it is not imported yet here)
    import torch

    from bench.engine_profile import print_profile_table, profile_steps

    torch.set_num_threads(args.threads)
    rows = profile_steps(args.model, args.profile_steps, timer=args.profile_timer, compiled=args.compile)
    meta = {"model": args.model, "threads": args.threads, "cpu_count": os.cpu_count(), "timer": args.profile_timer,
            "busy_neighbour": args.busy_neighbour, "omp_wait_policy": args.omp_wait_policy,
            "compiled": args.compile}  # fmt: skip
    if args.json:
        print(json.dumps({"meta": meta, "profile": rows}))
    else:
        print_profile_table(rows, meta)
    return 0


def _structured_main(args) -> int:
    import torch

    from bench.engine_structured import bench_structured, print_structured_table

    torch.set_num_threads(args.threads)
    rows = bench_structured(args.model, args.profile_steps)
    meta = {"model": args.model, "threads": args.threads, "cpu_count": os.cpu_count(),
            "load_average_1m": os.getloadavg()[0]}  # fmt: skip
    if args.json:
        print(json.dumps({"meta": meta, "structured": rows}))
    else:
        print_structured_table(rows, meta)
    return 0


def _spec_main(args) -> int:
    import torch

    from bench.engine_spec import print_spec_table, run_spec

    torch.set_num_threads(args.threads)
    pair = Path(args.pair)
    if not (pair / "target" / "config.json").exists():
        from engine.train_pair import main as train_main

        train_main([str(pair)])
    rows = run_spec(pair, args.spec_max_tokens, args.num_speculative_tokens)
    if args.json:
        print(json.dumps({"spec": rows}))
    else:
        print_spec_table(rows, pair, args.num_speculative_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
