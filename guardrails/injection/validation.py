"""Leave-one-source-out validation: train on every source but one, score that one, for each source in turn.

What it measures is the question the detector faces in production: how it does on prompts from a place it never
saw. The out-of-fold probabilities also pick the operating threshold, so the threshold is not tuned on rows the
model was fitted to.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from guardrails.injection.dataset import Sample, sample_weights
from guardrails.injection.logistic import FitConfig, fit

MAX_BENIGN_FPR = 0.03
TRIGGER_WORD_SOURCES = frozenset(
    {"benign_trigger_words_wnut17_raw", "benign_trigger_words_xquad_sentences", "synthetic_hard_negatives"}
)
REPORTED_LANGS = ("en", "de", "es")
SYNTHETIC_PREFIX = "synthetic_"  # the sources generated here (synthetic*.py), not copied from a public set
MIN_ROWS_PER_LANG = 5
# Candidate thresholds, evenly spaced in log-odds (0.05 apart: each step moves the odds by 5%), from 0.047 to 0.9991.
# A grid even in probability is fine at 0.5 and coarse near 1, where a detector's benign scores bunch: one step of
# 0.005 there (0.985 -> 0.99) raises the odds by half and moved recall on unseen writers by four points
# (docs/benchmarks.md).
THRESHOLD_GRID = 1.0 / (1.0 + np.exp(-np.arange(-3.0, 7.0, 0.05)))


@dataclass(frozen=True, slots=True)
class Rate:
    """Flagged / rows: recall on attacks, false-positive rate on benign prompts."""

    flagged: int
    rows: int

    @property
    def value(self) -> float:
        return self.flagged / self.rows if self.rows else 0.0


@dataclass(frozen=True)
class SourceResult:
    source: str
    recall: Rate | None  # attacks in the source
    fpr: Rate | None  # benign prompts in the source
    by_lang: dict[str, dict[str, float]] = field(default_factory=dict)
    """{"de": {"recall": 0.9, "rows_recall": 37}, ...}: each of REPORTED_LANGS with MIN_ROWS_PER_LANG rows or more,
    for sources in several languages."""

    def to_json(self) -> dict:
        out = asdict(self)
        for key in ("recall", "fpr"):
            rate = getattr(self, key)
            out[key] = (
                None if rate is None else {"value": round(rate.value, 4), "flagged": rate.flagged, "rows": rate.rows}
            )
        return out


def out_of_fold(samples: list[Sample], matrix, config: FitConfig) -> np.ndarray:
    """P(injection) of every row from the model trained without that row's source."""
    labels = np.array([s.label for s in samples])
    sources = np.array([s.source for s in samples])
    probabilities = np.zeros(len(samples))
    for source in sorted(set(sources)):
        held = sources == source
        train = ~held
        kept = [s for s, keep in zip(samples, train) if keep]
        coef, bias = fit(matrix[train], labels[train], sample_weights(kept), config)
        probabilities[held] = 1.0 / (1.0 + np.exp(-(matrix[held] @ coef + bias)))
    return probabilities


def pick_threshold(
    samples: list[Sample],
    probabilities: np.ndarray,
    also_flagged: np.ndarray | None = None,
    max_fpr: float = MAX_BENIGN_FPR,
) -> float:
    """The lowest threshold (most recall) at which held-out benign prompts of the public sources, all of them pooled,
    and the trigger-word ones (ours included) on their own, are flagged at most `max_fpr` of the time, counting the
    rows `also_flagged` (the rules' flags: the detector blocks when either fires, so the false positives add up).

    Our generated benign rows are left out of the pooled rate: they are written to be told apart, and hundreds of
    easy rows in the denominator would let the threshold drop without any public prompt scoring better."""
    benign = np.array([s.label == 0 and not s.source.startswith(SYNTHETIC_PREFIX) for s in samples])
    trigger = np.array([s.label == 0 and s.source in TRIGGER_WORD_SOURCES for s in samples])
    extra = np.zeros(len(samples), bool) if also_flagged is None else also_flagged
    for threshold in THRESHOLD_GRID:
        flagged = (probabilities >= threshold) | extra
        if flagged[benign].mean() <= max_fpr and (not trigger.any() or flagged[trigger].mean() <= max_fpr):
            return round(float(threshold), 5)
    return round(float(THRESHOLD_GRID[-1]), 5)


def source_table(samples: list[Sample], flagged: np.ndarray) -> list[SourceResult]:
    results = []
    for source in sorted({s.source for s in samples}):
        index = [i for i, s in enumerate(samples) if s.source == source]
        rates = {label: _rate([flagged[i] for i in index if samples[i].label == label]) for label in (0, 1)}
        by_lang: dict[str, dict[str, float]] = {}
        if len({samples[i].lang for i in index}) > 1:  # a one-language source's row says it all
            for lang in REPORTED_LANGS:
                for label, metric in ((1, "recall"), (0, "fpr")):
                    in_lang = [i for i in index if samples[i].lang == lang and samples[i].label == label]
                    if len(in_lang) >= MIN_ROWS_PER_LANG:
                        by_lang.setdefault(lang, {})[metric] = round(float(np.mean(flagged[in_lang])), 4)
                        by_lang[lang][f"rows_{metric}"] = len(in_lang)
        results.append(SourceResult(source, rates[1], rates[0], by_lang))
    return results


def pooled(samples: list[Sample], flagged: np.ndarray) -> dict[str, float]:
    """Precision, recall and FPR over all held-out rows, and recall / FPR per language."""
    labels = np.array([s.label for s in samples])
    true_pos = int((flagged & (labels == 1)).sum())
    false_pos = int((flagged & (labels == 0)).sum())
    out = {
        "precision": true_pos / max(1, true_pos + false_pos),
        "recall": true_pos / max(1, (labels == 1).sum()),
        "fpr": false_pos / max(1, (labels == 0).sum()),
    }
    langs = np.array([s.lang for s in samples])
    for lang in REPORTED_LANGS:
        for label, metric in ((1, "recall"), (0, "fpr")):
            mask = (langs == lang) & (labels == label)
            if mask.any():
                out[f"{metric}_{lang}"] = float(flagged[mask].mean())
                out[f"rows_{metric}_{lang}"] = int(mask.sum())
    return {key: round(value, 4) if isinstance(value, float) else value for key, value in out.items()}


def _rate(flags: list[bool]) -> Rate | None:
    return Rate(int(sum(flags)), len(flags)) if flags else None
