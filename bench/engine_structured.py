"""`sluicegate bench engine --structured`: what a JSON-schema grammar on every row costs a decode step, at batch
sizes 1, 8 and 64.

Each batch size decodes the same prompts (random, PROMPT_TOKENS tokens, temperature 1.0, EOS ignored) for the same
number of steps twice on one engine: unconstrained, and with SCHEMA's grammar on every row. SCHEMA cannot close
before MIN_RECORDS records are written, far more tokens than are measured, so both runs hold the whole batch for
every measured step. The runs alternate, ROUNDS short rounds of each (a shared machine's slow spells fall on both
alike), and the engine's step clock (engine/step_profile.py) times every step; the table shows medians over them:

  unconstrained   ms per step without a grammar
  structured      ms per step with one on every row
  overhead        structured over unconstrained, in percent of the unconstrained step
  outside fwd     the same from the steps' time outside the forward pass (the same work in both runs): the grammar's
                  cost without the forward's noise, which on a shared CPU can swamp it
  masker          ms per step in GrammarMasker.apply: every row's bitmask filled (xgrammar) and applied to the logits
                  (the rest of the overhead is each row's matcher taking its token, in the "output" phase)
"""

from __future__ import annotations

import time

import numpy as np
import torch
import xgrammar as xgr

from bench.engine_profile import BATCH_SIZES, PROMPT_TOKENS, WARMUP_STEPS, decode_steps
from engine.step_profile import PHASES
from engine.structured.masker import GrammarMasker
from engine.structured.spec import GrammarSpec

ROUNDS = 8
MIN_RECORDS = 256  # each record is over 100 characters of keys and punctuation: the grammar cannot end in 25k tokens

# A record of the kinds of values structured outputs ask for: bounded strings, an enum, bounded integers, a nested
# object, an optional field, an array, a boolean. (No unbounded number: a random model can stay in its digits.)
RECORD = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 99999},
        "name": {"type": "string", "maxLength": 16},
        "kind": {"enum": ["person", "company", "place", "event"]},
        "rank": {"type": "integer", "minimum": 1, "maximum": 10},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 4},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "zip": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
            },
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "active": {"type": "boolean"},
    },
    "required": ["id", "name", "kind", "rank", "tags", "address", "active"],
    "additionalProperties": False,
}
SCHEMA = {
    "type": "object",
    "properties": {"records": {"type": "array", "items": RECORD, "minItems": MIN_RECORDS}},
    "required": ["records"],
    "additionalProperties": False,
}


class TimedMasker(GrammarMasker):
    """The engine's masker, timing each apply (wall seconds) while `enabled`."""

    def __init__(self, vocab_size: int):
        super().__init__(vocab_size)
        self.enabled = False
        self.calls_s: list[float] = []

    def apply(self, logits: torch.Tensor, matchers: list[xgr.GrammarMatcher | None]) -> None:
        if not self.enabled:
            super().apply(logits, matchers)
            return
        start_s = time.perf_counter()
        super().apply(logits, matchers)
        self.calls_s.append(time.perf_counter() - start_s)


def bench_structured(model_dir: str, num_steps: int, batch_sizes=BATCH_SIZES, **engine_kwargs) -> list[dict]:
    """One row per batch size: median ms per step unconstrained and structured, and the masker's. `num_steps`
    decode steps of each are measured per batch size, in ROUNDS rounds."""
    from engine import LLM, SamplingParams

    llm = LLM(model_dir, max_num_seqs=max(64, *batch_sizes), **engine_kwargs)
    engine = llm.engine
    masker = engine.masker = TimedMasker(engine.spec.vocab_size)
    spec = GrammarSpec.json_schema(SCHEMA, "response_format")
    engine.grammars.compile(spec)  # compiled before the requests come: each joins the batch at once
    round_steps = -(-num_steps // ROUNDS)
    max_tokens = WARMUP_STEPS + round_steps + 2  # no request finishes inside the measured steps
    unconstrained = SamplingParams(temperature=1.0, max_tokens=max_tokens, ignore_eos=True)
    structured = SamplingParams(temperature=1.0, max_tokens=max_tokens, ignore_eos=True, structured=spec)
    rng = np.random.default_rng(0)
    rows = []
    for batch in batch_sizes:
        prompts = [rng.integers(5, engine.spec.vocab_size, size=PROMPT_TOKENS).tolist() for _ in range(batch)]
        phases_s: dict[str, dict[str, list[float]]] = {
            k: {p: [] for p in PHASES} for k in ("unconstrained", "structured")
        }
        masker.calls_s = []
        for round_index in range(ROUNDS):
            for kind, params in (("unconstrained", unconstrained), ("structured", structured)):
                masker.enabled = kind == "structured"
                clock = decode_steps(engine, f"{kind}-{batch}-{round_index}", prompts, params, round_steps)
                masker.enabled = False
                for phase in PHASES:
                    phases_s[kind][phase] += clock[phase]
        rows.append(_row(batch, phases_s, masker.calls_s))
    return rows


def _row(batch: int, phases_s: dict[str, dict[str, list[float]]], masker_s: list[float]) -> dict:
    steps_s = {kind: [sum(step) for step in zip(*phases.values())] for kind, phases in phases_s.items()}
    # The forward pass is the same work with or without a grammar; what else a step does is where the grammar's
    # cost lands, so the medians of that part measure it without the forward's noise (a slow spell on a shared CPU).
    outside_s = {
        kind: [total - forward for total, forward in zip(steps_s[kind], phases["forward"])]
        for kind, phases in phases_s.items()
    }
    unconstrained_ms, structured_ms = (float(np.median(steps_s[k])) * 1000 for k in ("unconstrained", "structured"))
    outside_ms = {kind: float(np.median(s)) * 1000 for kind, s in outside_s.items()}
    return {
        "batch": batch, "steps": len(steps_s["structured"]), "unconstrained_ms": unconstrained_ms,
        "structured_ms": structured_ms, "overhead_pct": (structured_ms / unconstrained_ms - 1) * 100,
        "outside_forward_overhead_pct": (outside_ms["structured"] - outside_ms["unconstrained"]) / unconstrained_ms * 100,
        "masker_ms": float(np.median(masker_s)) * 1000,
        "phases_ms": {k: {p: float(np.median(s)) * 1000 for p, s in phases.items()} for k, phases in phases_s.items()},
    }  # fmt: skip


def print_structured_table(rows: list[dict], meta: dict) -> None:
    print(f"bench engine --structured: wall ms per decode step (medians of {ROUNDS} alternating rounds), a JSON-schema"
          f" grammar on every row vs none, model {meta['model']}, {meta['threads']} torch threads,"
          f" {meta['cpu_count']} CPUs, load average {meta['load_average_1m']:.2f}")  # fmt: skip
    print(f"{'batch':>5} {'steps':>6} {'unconstrained':>13} {'structured':>10} {'overhead':>9} {'outside fwd':>12}"
          f" {'masker':>8}")  # fmt: skip
    for r in rows:
        print(f"{r['batch']:>5} {r['steps']:>6} {r['unconstrained_ms']:>13.3f} {r['structured_ms']:>10.3f}"
              f" {r['overhead_pct']:>8.1f}% {r['outside_forward_overhead_pct']:>11.1f}% {r['masker_ms']:>8.3f}")  # fmt: skip
