"""Section 'equivalence': the engine on the GPU generates what it generates there with the torch kernels.

The throughput section runs random weights and cannot tell a wrong answer from a right one, and the token-exact tests
run on a CPU (transformers against the torch path; the Triton kernels, interpreted, against the torch path). Here the
small preset runs in fp32 on the GPU, greedy, three times: with the torch kernels, eager (the reference); with the
Triton kernels (attention, the fused residual add + RMSNorm and RoPE), eager, whose matrix products are the same
cuBLAS calls, so a difference is the kernels'; and as a GPU replica runs, decode steps replayed from CUDA graphs,
which pad the batch to a captured size (other products' shapes, so a near-tie in random weights could flip a token:
read a divergence's position before blaming the graphs). The workload makes every path run: prompts sharing a prefix
(prefix-cache hits), a token budget smaller than the prompts (chunked prefill, steps mixing decodes and prefill
chunks), a KV cache too small for every request at once (preemption), and a batch that shrinks through several graph
sizes. Under --cpu-smoke (no CUDA, no graphs) the Triton run is the interpreted kernels.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Profile:
    preset: str
    num_prompts: int
    max_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int
    num_kv_blocks: int  # small enough that some requests are preempted


GPU = Profile(
    preset="small", num_prompts=32, max_tokens=48, max_num_seqs=16, max_num_batched_tokens=96, num_kv_blocks=64
)
CPU_SMOKE = Profile(
    preset="tiny", num_prompts=6, max_tokens=24, max_num_seqs=4, max_num_batched_tokens=32, num_kv_blocks=16
)
SHARED_PREFIX_TOKENS = 48
BLOCK_SIZE = 16


def prompts(profile: Profile, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """Half share one prefix (then their own 4-60 tokens), half are their own 8-100 tokens."""
    rng = np.random.default_rng(seed)
    shared = rng.integers(5, vocab_size, SHARED_PREFIX_TOKENS).tolist()
    out = []
    for i in range(profile.num_prompts):
        if i % 2 == 0:
            out.append(shared + rng.integers(5, vocab_size, int(rng.integers(4, 61))).tolist())
        else:
            out.append(rng.integers(5, vocab_size, int(rng.integers(8, 101))).tolist())
    return out


def generate(model_dir: Path, profile: Profile, device: str, backend: str, graphs: bool, batch: list[list[int]]):
    from engine import LLM, SamplingParams

    llm = LLM(
        str(model_dir),
        device=device,
        dtype="float32",
        attention_backend=backend,
        enforce_eager=not graphs,
        cuda_graph_sizes=tuple(size for size in (1, 2, 4, 8, 16, 32) if size <= profile.max_num_seqs),
        max_num_seqs=profile.max_num_seqs,
        max_num_batched_tokens=profile.max_num_batched_tokens,
        num_kv_blocks=profile.num_kv_blocks,
        block_size=BLOCK_SIZE,
    )
    params = SamplingParams(temperature=0.0, max_tokens=profile.max_tokens, ignore_eos=True)
    tokens = [out.outputs[0].token_ids for out in llm.generate(batch, params)]
    return tokens, llm.engine.counters


def run_equivalence(report, profile: Profile, device: str) -> None:
    from bench.gpu.report import Row
    from engine.tiny_model import make_tiny_model

    runs = [("Triton, eager", "triton", False)] + (
        [("Triton + CUDA graphs", "triton", True)] if device == "cuda" else []
    )
    try:
        with tempfile.TemporaryDirectory(prefix="sluicegate-equivalence-") as tmp:
            model_dir = make_tiny_model(Path(tmp) / profile.preset, preset=profile.preset)
            batch = prompts(profile, json.loads((model_dir / "config.json").read_text())["vocab_size"])
            reference, stats = generate(model_dir, profile, device, "torch", False, batch)
            outputs = {label: generate(model_dir, profile, device, backend, graphs, batch)[0]
                       for label, backend, graphs in runs}  # fmt: skip
    finally:
        if device == "cuda":  # also after a failure: the engine section's child sizes its KV cache from free memory
            import gc

            import torch

            gc.collect()
            torch.cuda.empty_cache()
    paths = {
        "cached prompt tokens": stats.prefix_cache_hits_total,
        "preemptions": stats.num_preemptions_total,
        "chunked steps": stats.num_chunked_prefill_steps_total,
    }
    covered = ", ".join(f"{count} {path}" for path, count in paths.items())
    report.add(
        Row("equiv", "paths taken (each must be > 0)", covered, status="PASS" if min(paths.values()) else "FAIL")
    )
    for label, tokens in outputs.items():
        identical = sum(a == b for a, b in zip(tokens, reference))
        agreeing = [len(os.path.commonprefix([a, b])) for a, b in zip(tokens, reference)]
        report.add(
            Row(
                "equiv",
                f"greedy, {profile.preset} fp32: {label} vs torch",
                f"{identical}/{len(batch)} identical",
                "",
                f"min agreeing prefix {min(agreeing)}/{profile.max_tokens}",
                "PASS" if identical == len(batch) else "FAIL",
            )
        )
