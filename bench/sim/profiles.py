"""Step-time profiles: how long one engine step takes, from what the step batches.

    step_s = fixed_s + prefill_token_s * prefill tokens + decode_row_s * decode rows
           + context_token_s * decode context tokens + prefill_pair_s * prefill attention pairs

`decode context tokens` is the KV the decode rows' attention reads (each row's whole context: memory-bound);
`prefill attention pairs` is, per prefill chunk, its tokens times the context they attend to (cached prefix, earlier
chunks and the chunk itself: compute-bound, quadratic in the prompt). Each term is what a roofline says for one
cost: weight reads per step, matmuls per token, per-row overhead, KV reads per decode, attention FLOPs per prefill
pair; the model stays cheap enough to replay thousands of requests in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepProfile:
    name: str
    fixed_s: float
    """Per step whatever it batches: weight reads, launch and scheduler overhead."""
    prefill_token_s: float
    """Per prompt token computed in the step."""
    decode_row_s: float
    """Per decoding sequence (one new token each): sampling and per-row overhead on top of the matmul cost."""
    context_token_s: float
    """Per KV token the decode rows' attention reads."""
    prefill_pair_s: float
    """Per (query token, context token) pair of a prefill chunk's attention."""
    token_budget: int
    """max_num_batched_tokens: decodes take one each, prefill chunks the rest."""
    max_running: int
    """max_num_seqs: sequences in the running batch."""

    def step_s(self, prefill_tokens: int, decode_rows: int, context_tokens: int, prefill_pairs: int = 0) -> float:
        return (
            self.fixed_s
            + self.prefill_token_s * prefill_tokens
            + self.decode_row_s * decode_rows
            + self.context_token_s * context_tokens
            + self.prefill_pair_s * prefill_pairs
        )


# Our engine on the tiny model (2 layers) on the "2-core AMD box" (docs/benchmarks.md), fitted by
# `python -m bench.sim.fit_cpu` on 2026-12-01 (engine defaults: budget 2048, 128 sequences). Measured with the
# machine shared (load average ~11), so the fixed cost is mostly waiting for a core; prefill is dominated by the
# quadratic attention (2000 tokens: ~5 s), the per-token matmul cost fitted to 0. Refit with the same command.
CPU_TINY = StepProfile(
    name="cpu-tiny",
    fixed_s=5.4e-2,
    prefill_token_s=0.0,
    decode_row_s=4.0e-4,
    context_token_s=2.6e-6,
    prefill_pair_s=1.26e-6,
    token_budget=2048,
    max_running=128,
)

# Llama-3-8B (bf16) on one H100 SXM under vLLM, from public figures, not measured here:
# - fixed: 16 GB of weights read per step at ~3.35 TB/s is ~5 ms; vLLM's small-batch decode ITL for this model on
#   H100 is reported at ~6-7 ms, so 6 ms.
# - prefill: ~2 * 8e9 FLOPs per token at ~400 TFLOP/s effective bf16 is ~40 us; vLLM's prefill throughput for
#   8B-class models on H100 is reported at 15-25k tokens/s, so 50 us per token.
# - decode row: ITL rises from ~7 ms at batch 1 to ~20-25 ms at batch 128-256 in vLLM's published serving
#   benchmarks, ~0.06 ms per row beyond the context cost.
# - context: 128 KiB of KV per token (32 layers x 8 KV heads x 128 dims x 2 x 2 bytes) read at ~3.35 TB/s: 0.04 us.
# - prefill pair: 4 x 32 layers x 32 heads x 128 dims = 0.52 MFLOP per (query, key) pair at ~200 TFLOP/s, the
#   attention efficiency FlashAttention-2 reports on H100: 2.6 ps (an 8k-token prompt adds ~0.17 s).
# - budget 8192 and 256 sequences: vLLM's defaults with chunked prefill on an H100 (V1 engine, online serving).
H100_LLAMA3_8B = StepProfile(
    name="h100-llama3-8b",
    fixed_s=6.0e-3,
    prefill_token_s=5.0e-5,
    decode_row_s=6.0e-5,
    context_token_s=4.0e-8,
    prefill_pair_s=2.6e-12,
    token_budget=8192,
    max_running=256,
)

PROFILES: dict[str, StepProfile] = {p.name: p for p in (CPU_TINY, H100_LLAMA3_8B)}
