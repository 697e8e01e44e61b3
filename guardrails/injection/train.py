"""Train the shipped injection model, validate it leave-one-source-out, and pick its threshold.

    python -m guardrails.injection.train --out guardrails/injection/model.npz [--subset N] [--seed 0]

Steps: load data/ and the synthetic rows, featurize once, run leave-one-source-out (one fit per source) for the
out-of-fold table and the threshold, fit the final model on everything, and write `out` (weights) and `out`.json
(threshold, table, pooled numbers, recorded scores on a fixed sample). Deterministic for a given seed: the data
order is fixed, the synthetic rows are seeded and L-BFGS starts from zeros. Needs scipy (a dev dependency).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from guardrails.injection import dataset, validation
from guardrails.injection.dataset import Sample
from guardrails.injection.detector import InjectionDetector
from guardrails.injection.features import NUM_BUCKETS, featurize
from guardrails.injection.logistic import FitConfig, design_matrix, fit
from guardrails.injection.model import InjectionModel
from guardrails.policy import DEFAULT_INJECTION_THRESHOLD

RECORDED_PER_CLASS = 12
RECORDED_MAX_CHARS = 1200  # long enough for a few jailbreak templates, so the sample has scores on both sides of 0.5


def recorded_sample(
    samples: list[Sample], seed: int, per_class: int = RECORDED_PER_CLASS, max_chars: int = RECORDED_MAX_CHARS
) -> list[Sample]:
    """A fixed handful of short rows of each class whose scores the shipped weights must reproduce (the encoder's
    training records its own, with smaller numbers)."""
    rng = np.random.default_rng(seed)
    picked = []
    for label in (0, 1):
        short = [s for s in samples if s.label == label and len(s.text) <= max_chars]
        picked += [short[i] for i in sorted(rng.permutation(len(short))[:per_class])]
    return picked


def rule_flags(samples: list[Sample]) -> np.ndarray:
    """Which rows the rules alone flag at the policy's default threshold: the model's threshold is picked for the
    detector as the gateway runs it (rules or model)."""
    rules_only = InjectionDetector()
    return np.array([rules_only.score(s.text).score >= DEFAULT_INJECTION_THRESHOLD for s in samples])


def train(samples: list[Sample], config: FitConfig, seed: int) -> tuple[InjectionModel, dict]:
    started_s = time.perf_counter()
    matrix = design_matrix([featurize(s.text) for s in samples])
    held_out = validation.out_of_fold(samples, matrix, config)
    by_rules = rule_flags(samples)
    threshold = validation.pick_threshold(samples, held_out, also_flagged=by_rules)
    by_model = held_out >= threshold
    coef, bias = fit(matrix, np.array([s.label for s in samples]), dataset.sample_weights(samples), config)
    model = InjectionModel(coef, bias, threshold)
    report = {
        "trained_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()} {platform.processor() or platform.system()}",
        "rows": len(samples),
        "seed": seed,
        "l2": config.l2,
        "num_buckets": NUM_BUCKETS,
        "train_seconds": round(time.perf_counter() - started_s, 1),
        # The model alone, then the detector as shipped (rules or model). The rules were written while reading
        # deepset's training split, so on that one source the second table is not a held-out figure.
        "leave_one_source_out": {
            "pooled": validation.pooled(samples, by_model),
            "sources": [r.to_json() for r in validation.source_table(samples, by_model)],
        },
        "with_rules": {
            "pooled": validation.pooled(samples, by_model | by_rules),
            "sources": [r.to_json() for r in validation.source_table(samples, by_model | by_rules)],
        },
        "recorded": [{"text": s.text, "score": model.score(s.text)} for s in recorded_sample(samples, seed)],
    }
    return model, report


def format_table(report: dict, table: str = "leave_one_source_out") -> str:
    lines = [f"{'held-out source':<52} {'rows':>5} {'recall':>7} {'FPR':>7}  by language"]
    for row in report[table]["sources"]:
        rows = sum(r["rows"] for r in (row["recall"], row["fpr"]) if r)
        cells = [f"{row[k]['value']:.3f}" if row[k] else "-" for k in ("recall", "fpr")]
        langs = "  ".join(
            f"{lang} " + "/".join(f"{m} {v:.2f}" for m, v in d.items() if not m.startswith("rows"))
            for lang, d in row["by_lang"].items()
        )
        lines.append(f"{row['source']:<52} {rows:>5} {cells[0]:>7} {cells[1]:>7}  {langs}")
    pooled = report[table]["pooled"]
    lines.append("pooled: " + ", ".join(f"{k} {v}" for k, v in pooled.items() if not k.startswith("rows")))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="weights file (.npz); the report goes beside it")
    parser.add_argument("--subset", type=int, default=None, help="at most N rows per source (a quick run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--l2", type=float, default=FitConfig().l2)
    args = parser.parse_args(argv)
    samples = dataset.load_all(args.seed)
    if args.subset is not None:
        samples = dataset.subset(samples, args.subset, args.seed)
    model, report = train(samples, FitConfig(l2=args.l2), args.seed)
    model.save(args.out, report)
    print("the model alone:\n" + format_table(report))
    print("rules or model (the detector as shipped):\n" + format_table(report, "with_rules"))
    print(f"threshold {model.threshold}; {len(samples)} rows; {report['train_seconds']} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
