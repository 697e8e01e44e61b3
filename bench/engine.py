"""`sluicegate bench engine`: our engine vs transformers on the same model, prompts and output lengths.

Systems (each in its own subprocess, so peak memory is its own):
  ours        engine.LLM: paged KV cache, continuous batching, chunked prefill
  hf-cb       transformers' continuous batching (ContinuousBatchingManager, paged attention), per-request lengths
  hf-padded   transformers' padded batched generate(): batches of --padded-batch-size in arrival order, each run to
              its longest request (the tokens past a request's own length are wasted, which is the point)
Workload: heavy-tailed (Pareto) prompt and output lengths, EOS ignored so every system makes the same tokens.
"""

from __future__ import annotations

import argparse
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


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_ours(model_dir: str, work: dict, args) -> dict:
    from engine import LLM, SamplingParams

    llm = LLM(model_dir, max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens)
    engine = llm.engine
    start = time.perf_counter()
    for i, (prompt, n) in enumerate(zip(work["prompts"], work["output_lens"])):
        engine.add_request(str(i), prompt, SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True))
    first_token, last_token, itl = {}, {}, []
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


RUNNERS = {"ours": run_ours, "hf-padded": run_hf_padded, "hf-cb": run_hf_cb}


def _worker(args) -> int:
    import torch

    torch.set_num_threads(args.threads)  # the same for every system
    work = json.loads(Path(args.workload).read_text())
    result = RUNNERS[args.worker](args.model, work, args)
    result["peak_rss_mib"] = _peak_rss_mib()
    print("RESULT " + json.dumps(result))
    return 0


def _run_system(system: str, workload_path: str, args) -> dict:
    cmd = [sys.executable, "-m", "bench.engine", "--worker", system, "--workload", workload_path, "--model", args.model]
    cmd += ["--max-num-seqs", str(args.max_num_seqs), "--max-num-batched-tokens", str(args.max_num_batched_tokens)]
    cmd += ["--padded-batch-size", str(args.padded_batch_size), "--threads", str(args.threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}


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
    print(
        f"bench engine: {meta['num_requests']} requests, prompt mean {meta['prompt_mean']:.0f} (max {meta['prompt_max']}),"
        f" output mean {meta['output_mean']:.0f} (max {meta['output_max']}) tokens, model {meta['model']}"
    )
    header = f"{'system':<10} {'out tok/s':>10} {'elapsed s':>10} {'TTFT p50 ms':>12} {'ITL p50 ms':>11} {'ITL p99 ms':>11} {'peak RSS MiB':>13} {'ours is':>9}"
    print(header)
    ours = next((r for r in rows if r["system"] == "ours" and "error" not in r), None)
    for r in rows:
        if "error" in r:
            print(f"{r['system']:<10} FAILED: {r['error']}")
            continue
        ratio = f"{ours['output_tok_s'] / r['output_tok_s']:.2f}x" if ours and r is not ours else "-"
        print(
            f"{r['system']:<10} {_fmt(r['output_tok_s']):>10} {_fmt(r['elapsed_s']):>10} {_fmt(r['ttft_p50_s'], 'ms'):>12}"
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
    parser.add_argument("--spec", action="store_true", help="speculative decoding section instead (bench/engine_spec.py)")
    parser.add_argument("--pair", default=".sluicegate/models/pair", help="trained target/draft pair (made if missing)")
    parser.add_argument("--spec-max-tokens", type=int, default=64)
    parser.add_argument("--num-speculative-tokens", type=int, default=4)
    parser.add_argument("--worker", choices=sorted(RUNNERS), help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args)
    if args.spec:
        return _spec_main(args)
    if args.model is None:
        args.model = str(DEFAULT_MODEL_DIR)
        if not (DEFAULT_MODEL_DIR / "config.json").exists():
            from engine.tiny_model import make_tiny_model

            make_tiny_model(DEFAULT_MODEL_DIR, preset="small")
    vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"]
    work = make_workload(args.num_requests, vocab, args.seed, args.prompt_mean, args.output_mean)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(work, f)
    rows = []
    try:
        for system in args.systems.split(","):
            rows.append(summarize(system, _run_system(system, f.name, args)))
    finally:
        os.unlink(f.name)
    plens, olens = [len(p) for p in work["prompts"]], work["output_lens"]
    meta = {
        "model": args.model, "num_requests": args.num_requests, "prompt_mean": float(np.mean(plens)),
        "prompt_max": max(plens), "output_mean": float(np.mean(olens)), "output_max": max(olens),
        "cpu_count": os.cpu_count(), "threads": args.threads, "date": time.strftime("%Y-%m-%d"),
    }  # fmt: skip
    if args.json:
        print(json.dumps({"meta": meta, "results": rows}))
    else:
        print_table(rows, meta)
    return 0 if all("error" not in r for r in rows) else 1


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
