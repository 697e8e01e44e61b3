"""`sluicegate bench engine --spec`: speculative decoding vs none, at batch sizes 1, 4, 16, 64.

Workloads: prompt lookup (n-gram) on a copy-heavy workload (prompts that repeat a passage, so the continuation
often copies it), and a draft model on a trained target/draft pair (`sluicegate make-tiny-model DIR --train`),
whose prompts are real text the pair has learned from (the standard library's sources).
Each cell runs the same requests with speculation off and on (adaptive off, so the raw effect is measured), greedy.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

BATCH_SIZES = (1, 4, 16, 64)


def _text_prompts(tokenizer, count: int, prompt_len: int) -> list[list[int]]:
    from engine.tiny_model import training_corpus

    text = "\n".join(training_corpus(max_bytes=1 << 20))
    ids = tokenizer.encode(text, add_special_tokens=False)
    stride = max(1, (len(ids) - prompt_len) // max(1, count))
    return [ids[i * stride : i * stride + prompt_len] for i in range(count)]


def _copy_heavy(prompts: list[list[int]]) -> list[list[int]]:
    """Ask the model to continue a passage it has just seen twice: prompt lookup's home ground."""
    return [p + p for p in prompts]


def _run(model_dir: str, prompts: list[list[int]], max_tokens: int, **spec) -> dict:
    from engine import LLM, SamplingParams

    llm = LLM(model_dir, max_num_seqs=max(64, len(prompts)), **spec)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    llm.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=4))  # warm-up
    start = time.perf_counter()
    outs = llm.generate(prompts, params)
    elapsed = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    result = {"output_tok_s": tokens / elapsed, "outputs": [o.outputs[0].token_ids for o in outs]}
    if llm.engine.speculator is not None:
        stats = llm.engine.speculator.stats
        result["acceptance"] = stats.acceptance_rate
        result["tokens_per_draft"] = stats.mean_tokens_per_draft
    return result


def run_spec(pair_dir: Path, max_tokens: int, k: int) -> list[dict]:
    from transformers import AutoTokenizer

    target, draft = str(pair_dir / "target"), str(pair_dir / "draft")
    tokenizer = AutoTokenizer.from_pretrained(target)
    base_prompts = _text_prompts(tokenizer, max(BATCH_SIZES), 64)
    rows = []
    workloads = [
        ("ngram", "copy-heavy", _copy_heavy(base_prompts), {"speculative_method": "ngram"}),
        ("draft", "text", base_prompts, {"speculative_method": "draft", "speculative_model": draft}),
    ]
    for method, workload, prompts, spec in workloads:
        for batch in BATCH_SIZES:
            off = _run(target, prompts[:batch], max_tokens)
            on = _run(target, prompts[:batch], max_tokens, **spec, num_speculative_tokens=k, speculative_adaptive=False)
            rows.append({
                "method": method, "workload": workload, "batch": batch,
                "off_tok_s": off["output_tok_s"], "on_tok_s": on["output_tok_s"],
                "speedup": on["output_tok_s"] / off["output_tok_s"], "acceptance": on["acceptance"],
                "tokens_per_draft": on["tokens_per_draft"], "identical_output": on["outputs"] == off["outputs"],
            })  # fmt: skip
    return rows


def print_spec_table(rows: list[dict], pair_dir: Path, k: int) -> None:
    info_path = pair_dir / "train_info.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    print(f"bench engine --spec: k={k}, greedy, pair {pair_dir} (trained {info.get('steps', '?')} steps)")
    print(f"{'method':<7} {'workload':<11} {'batch':>5} {'off tok/s':>10} {'on tok/s':>10} {'speedup':>8} "
          f"{'accept':>7} {'tok/draft':>9} {'same out':>9}")  # fmt: skip
    for r in rows:
        print(f"{r['method']:<7} {r['workload']:<11} {r['batch']:>5} {r['off_tok_s']:>10.1f} {r['on_tok_s']:>10.1f} "
              f"{r['speedup']:>7.2f}x {r['acceptance']:>7.2f} {r['tokens_per_draft']:>9.2f} "
              f"{'yes' if r['identical_output'] else 'NO':>9}")  # fmt: skip
