"""An optional local transformers sequence-classification model scoring prompts for injection.

Imported only when GuardrailsConfig.injection_model_path is set, so the gateway stays torch-free otherwise. The
model and tokenizer load with `local_files_only=True`: a path that is not a model folder fails at start-up.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from guardrails.errors import GuardrailConfigError


class InjectionClassifier:
    """`score(text)` is the model's probability of the injection label; a lock serializes calls because a fast
    tokenizer is not safe to share across threads while it truncates."""

    def __init__(self, model_path: str, injection_label: int, max_tokens: int) -> None:
        if not (Path(model_path) / "config.json").is_file():
            raise GuardrailConfigError(
                f"injection_model_path={model_path!r} is not a transformers model folder (no config.json); "
                "save a sequence-classification model there with save_pretrained, or set it to null"
            )
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
        self.model = AutoModelForSequenceClassification.from_pretrained(model_path, local_files_only=True).eval()
        num_labels = self.model.config.num_labels
        if not 0 <= injection_label < num_labels:
            raise GuardrailConfigError(
                f"injection_model_label={injection_label} but the model at {model_path!r} has {num_labels} labels"
            )
        self.injection_label = injection_label
        self.max_tokens = max_tokens
        self._lock = threading.Lock()

    def score(self, text: str) -> float:
        with self._lock, torch.inference_mode():
            inputs = self.tokenizer(text, truncation=True, max_length=self.max_tokens, return_tensors="pt")
            logits = self.model(**inputs).logits  # [1, num_labels]
            return float(torch.softmax(logits.float(), dim=-1)[0, self.injection_label])
