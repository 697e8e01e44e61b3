"""Section 3 (run as a child process, so a hang or crash costs only this section): the engine on random weights of
Llama-3-8B's shape, bf16, on a ShareGPT-like length mix.

    python -m bench.gpu.engine_bench --rows-file F --budget-s S --peak-gbps P [--cpu-smoke]

Steps: write the model folder (config + a small trained tokenizer; prompts are token ids), start the engine, warm
up (every kernel compiled before anything is timed), decode steps of 1, 64 and 256 sequences on the engine's step
clock (the forward pass and the time outside it; 256 together give the achieved memory bandwidth), then the
ShareGPT-like run sized to the time left. Rows are appended to F (a JSON list) as they are measured.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": 0,
    "eos_token_id": [1, 4],
    "torch_dtype": "bfloat16",
}
OUTPUT_TOKS_GOAL = 6600.0  # vLLM's published H100 figure for Llama-3-8B on ShareGPT
DECODE_BANDWIDTH_GOAL = 0.60
PROBE_BATCH, PROBE_PROMPT, PROBE_OUTPUT = 256, 128, 128
PROFILE_STEPS = 16  # measured decode steps per batch size


class Rows:
    def __init__(self, path: Path):
        self.path = path
        self.rows: list[dict] = []

    def add(self, item: str, value, unit: str = "", versus: str = "", status: str = "INFO") -> None:
        self.rows.append({"item": item, "value": value, "unit": unit, "versus": versus, "status": status})
        self.path.write_text(json.dumps(self.rows))
        print(f"  engine   {item:<52} {value!s:>12} {unit:<8} {versus:<26} {status}", flush=True)


def write_model_dir(out: Path, config: dict) -> Path:
    from transformers import PreTrainedTokenizerFast

    from engine.tiny_model import train_tokenizer

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": [1, 4]}))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(1024),  # prompts are token ids; this only has to exist and decode
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|end_of_text|>",
    )
    tokenizer.save_pretrained(out)
    return out


def sharegpt_like_lengths(num: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """Heavy-tailed (log-normal) prompt and output lengths with means near ShareGPT's ~200 in / ~180 out."""
    rng = np.random.default_rng(seed)

    def lognormal(mean: float, sigma: float, low: int, high: int) -> list[int]:
        mu = math.log(mean) - sigma**2 / 2
        return np.clip(rng.lognormal(mu, sigma, num), low, high).astype(int).tolist()

    return lognormal(200, 1.0, 4, 2048), lognormal(180, 0.9, 4, 1024)


def random_prompts(lengths: list[int], vocab_size: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    # Distinct random ids: no shared prefixes, so the prefix cache gives no free prefill.
    return [rng.integers(10, vocab_size, n).tolist() for n in lengths]


def decode_read_bytes(config: dict, context_tokens: int, dtype_bytes: int = 2) -> int:
    """Bytes one decode step must read: every weight except the embedding table (only its rows are gathered), plus
    K and V of every context token in every layer."""
    hidden, inter, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    heads, kv_heads, head_dim = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    per_layer = hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden + 3 * hidden * inter + 2 * hidden
    weights = layers * per_layer + hidden + config["vocab_size"] * hidden
    kv = context_tokens * layers * 2 * kv_heads * head_dim
    return (weights + kv) * dtype_bytes


def latencies_ms(outputs) -> tuple[list[float], list[float]]:
    """Per request: time to first token, and mean inter-token latency after it."""
    ttft, itl = [], []
    for out in outputs:
        if out.first_token_time is None or out.finished_time is None:
            continue
        ttft.append((out.first_token_time - out.arrival_time) * 1e3)
        n = len(out.outputs[0].token_ids)
        if n > 1:
            itl.append((out.finished_time - out.first_token_time) * 1e3 / (n - 1))
    return ttft, itl


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows-file", required=True, type=Path)
    parser.add_argument("--budget-s", type=float, default=300.0)
    parser.add_argument("--peak-gbps", type=float, default=0.0)
    parser.add_argument("--cpu-smoke", action="store_true", help="the tiny model on CPU, a handful of requests")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.budget_s
    rows = Rows(args.rows_file)

    from bench.engine_profile import WARMUP_STEPS, decode_steps
    from engine.llm import LLM
    from engine.sampling_params import SamplingParams

    with tempfile.TemporaryDirectory(prefix="sluicegate-bench-") as tmp:
        if args.cpu_smoke:
            from engine.tiny_model import make_tiny_model

            model_dir = make_tiny_model(Path(tmp) / "tiny")
            config = json.loads((model_dir / "config.json").read_text())
            engine_args = {"dtype": "float32", "max_num_seqs": 16, "max_num_batched_tokens": 256}
            probe_batch, probe_prompt, probe_output, max_requests = 4, 16, 8, 12
            length_cap = 32  # the interpreter-free CPU path is slow: keep the mix's shape, not its size
        else:
            config = LLAMA3_8B
            model_dir = write_model_dir(Path(tmp) / "llama3-8b-shape", config)
            engine_args = {
                "dtype": "bfloat16",
                "max_num_seqs": 256,
                "max_num_batched_tokens": 8192,
                "max_model_len": 4096,
            }
            probe_batch, probe_prompt, probe_output, max_requests = PROBE_BATCH, PROBE_PROMPT, PROBE_OUTPUT, 1000
            length_cap = None
        vocab = config["vocab_size"]

        start = time.monotonic()
        llm = LLM(model=str(model_dir), load_format="dummy", **engine_args)
        rows.add("engine start (dummy weights)", round(time.monotonic() - start, 1), "s")

        def greedy(max_tokens: int) -> SamplingParams:
            return SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)

        start = time.monotonic()
        # Compiles the kernels and warms the caches: short prompts, then a full prefill chunk and one more prompt, which
        # is prefilled in a mixed step beside the first ones' decodes.
        warm_batch = probe_batch // 4 + 1
        llm.generate(random_prompts([32] * 8, vocab, seed=1), greedy(8))
        llm.generate(random_prompts([probe_prompt] * warm_batch, vocab, seed=4), greedy(4))
        rows.add(f"warm-up (8 + {warm_batch} requests)", round(time.monotonic() - start, 1), "s")

        # Decode steps of a constant batch on the engine's step clock (synchronised at each phase on CUDA): the
        # forward pass, and what the step spends outside it (schedule, prepare, sample, output), per batch size.
        mean_context = probe_prompt + probe_output // 2
        step_ms = 0.0
        for batch in sorted({1, probe_batch // 4, probe_batch}):
            prompts = random_prompts([mean_context] * batch, vocab, seed=2)
            # The first prompts in decode while the rest prefill: none may finish inside the measured steps.
            prefill_steps = -(-batch * mean_context // llm.engine.config.max_num_batched_tokens)
            long_enough = greedy(prefill_steps + WARMUP_STEPS + PROFILE_STEPS + 2)
            phases_s = decode_steps(llm.engine, f"profile-{batch}", prompts, long_enough, PROFILE_STEPS)
            totals_ms = [1e3 * sum(step) for step in zip(*phases_s.values())]
            step_ms = statistics.median(totals_ms)
            forward_ms = 1e3 * statistics.median(phases_s["forward"])
            outside_ms = statistics.median([t - 1e3 * f for t, f in zip(totals_ms, phases_s["forward"])])
            rows.add(f"decode step b={batch} ctx~{mean_context} (forward / outside it)",
                     f"{step_ms:.2f} ({forward_ms:.2f} / {outside_ms:.2f})", "ms")  # fmt: skip
        step_bytes = decode_read_bytes(config, probe_batch * mean_context)
        gbps = step_bytes / step_ms / 1e6
        fraction = gbps / args.peak_gbps if args.peak_gbps else float("nan")
        held_to_goal = args.peak_gbps > 0 and not args.cpu_smoke
        status = ("PASS" if fraction >= DECODE_BANDWIDTH_GOAL else "MISS") if held_to_goal else "INFO"
        rows.add(
            f"decode step bandwidth ({step_bytes / 1e9:.1f} GB/step)",
            round(gbps, 1),
            "GB/s",
            f"{fraction:.0%} of peak (goal 60%)",
            status,
        )

        # Size the main run to the time left, from the probe's rate (an upper bound at full batch).
        prompt_lens, output_lens = sharegpt_like_lengths(max_requests)
        if length_cap:
            prompt_lens, output_lens = ([min(n, length_cap) for n in lens] for lens in (prompt_lens, output_lens))
        time_left = deadline - time.monotonic() - 10
        rate = probe_batch / step_ms * 1e3
        num = max(16, min(max_requests, int(0.5 * time_left * rate / statistics.mean(output_lens))))
        prompt_lens, output_lens = prompt_lens[:num], output_lens[:num]
        prompts = random_prompts(prompt_lens, vocab, seed=3)
        params = [greedy(n) for n in output_lens]
        start = time.monotonic()
        outs = llm.generate(prompts, params)
        wall_s = time.monotonic() - start
        out_tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        rows.add(
            f"sharegpt-like: {num} req, mean in {statistics.mean(prompt_lens):.0f} / out "
            f"{statistics.mean(output_lens):.0f}",
            round(wall_s, 1),
            "s",
        )
        toks = out_tokens / wall_s
        rows.add(
            "output throughput",
            round(toks, 1),
            "tok/s",
            "goal 6600 (vLLM H100)",
            "INFO" if args.cpu_smoke else ("PASS" if toks >= OUTPUT_TOKS_GOAL else "MISS"),
        )
        rows.add("total throughput (prompt + output)", round((out_tokens + sum(prompt_lens)) / wall_s, 1), "tok/s")
        ttft, itl = latencies_ms(outs)
        rows.add("TTFT p50 / p99 (all arrive at t=0)", f"{percentile(ttft, 50):.0f} / {percentile(ttft, 99):.0f}", "ms")
        rows.add("ITL p50 / p99 (per-request mean)", f"{percentile(itl, 50):.1f} / {percentile(itl, 99):.1f}", "ms")

        # What processing outputs during the next step buys (async_output_processing, on by default on CUDA): the
        # first requests of the same mix, with it off and on, on this engine, in the order off, on, on, off (so the
        # cache's warmth favours neither), each run sized to a twentieth of the main run's time at most.
        num_ab = max(8, min(num, int(num * 0.05 * max(0.0, deadline - time.monotonic() - 10) / max(wall_s, 1e-3))))
        tokens, seconds = {False: 0, True: 0}, {False: 0.0, True: 0.0}
        for on in (False, True, True, False):
            llm.engine.set_async_output(on)
            start = time.monotonic()
            outs = llm.generate(prompts[:num_ab], params[:num_ab])
            seconds[on] += time.monotonic() - start
            tokens[on] += sum(len(o.outputs[0].token_ids) for o in outs)
        llm.engine.set_async_output(None)
        rates = {on: tokens[on] / seconds[on] for on in (False, True)}
        rows.add(
            f"output throughput, outputs processed during the next step ({num_ab} req, twice each; off / on)",
            f"{rates[False]:.0f} / {rates[True]:.0f}",
            "tok/s",
            f"{rates[True] / rates[False]:.3f}x",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
