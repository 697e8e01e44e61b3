"""The shipped injection model: hashed-n-gram logistic regression weights (model.npz) and its operating point
(model.json, also holding the validation table and recorded scores). numpy only; loaded once per process.

`score` is calibrated to the operating point: it is the model's probability with the logit shifted so that the
threshold picked on held-out sources maps to 0.5, the policy's default `injection_threshold`. A tenant that sets
0.7 asks for more certainty than the validated operating point, one that sets 0.3 for less.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from guardrails.injection.features import NUM_BUCKETS, Features, featurize

MODEL_PATH = Path(__file__).resolve().parent / "model.npz"


@dataclass(frozen=True)
class InjectionModel:
    weights: np.ndarray  # float32 [NUM_BUCKETS]
    bias: float
    threshold: float
    """Raw probability at which a prompt is an injection (picked on held-out sources for FPR <= 3%)."""

    def raw_logit(self, features: Features) -> float:
        return (
            float(self.weights[features.char_buckets.astype(np.intp)].sum()) * features.char_value
            + float(self.weights[features.word_buckets.astype(np.intp)].sum()) * features.word_value
            + self.bias
        )

    def score(self, text: str) -> float:
        """P(injection) with the operating point moved to 0.5."""
        return self.score_features(featurize(text))

    def score_features(self, features: Features) -> float:
        return _sigmoid(self.raw_logit(features) - _logit(self.threshold))

    def save(self, path: Path, report: dict) -> None:
        """Weights to `path` (compressed npz), the threshold and `report` to `path` with a .json suffix."""
        np.savez_compressed(path, weights=self.weights, bias=np.float64(self.bias))
        meta = {"threshold": self.threshold, **report}
        path.with_suffix(".json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: Path = MODEL_PATH) -> InjectionModel:
        with np.load(path) as arrays:
            weights, bias = arrays["weights"], float(arrays["bias"])
        if weights.shape != (NUM_BUCKETS,):
            raise ValueError(f"{path}: weights of shape {weights.shape}, features need ({NUM_BUCKETS},)")
        return cls(weights, bias, float(load_report(path)["threshold"]))


def load_report(path: Path = MODEL_PATH) -> dict:
    return json.loads(path.with_suffix(".json").read_text())


@functools.cache
def shipped_model() -> InjectionModel:
    """The model in the package, loaded on first use (~1 MB, a few ms) and shared by every detector and thread."""
    return InjectionModel.load(MODEL_PATH)


def _sigmoid(x: float) -> float:
    return 0.5 * (1.0 + math.tanh(0.5 * x))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))
