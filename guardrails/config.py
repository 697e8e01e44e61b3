"""Process-wide guardrail settings (GuardrailsConfig), validated once at start-up; tenant choices live in policy.py."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from guardrails.errors import GuardrailConfigError

PII_ENGINES = ("fast", "presidio")


@dataclass(frozen=True)
class GuardrailsConfig:
    pii_engine: str = "fast"
    """fast: Presidio's recognizers called directly, each only when a cheap trigger (a digit, an `@`, a key prefix)
    is present, phonenumbers only on digit runs, context words scored by Presidio's enhancer only when a score is
    below its threshold. presidio: the full `AnalyzerEngine.analyze` on every text (slower, same recognizers)."""
    spacy_model_path: str | None = None
    """A local spaCy pipeline folder with NER (e.g. an unpacked en_core_web_sm); enables PERSON, LOCATION,
    ORGANIZATION and NRP. None: a blank English pipeline, nothing downloaded."""
    injection_model_path: str | None = None
    """A local transformers sequence-classification folder; its injection probability is combined with the rules."""
    injection_model_label: int = 1
    """Index of the classifier's `injection` label."""
    injection_model_max_tokens: int = 256
    """Prompt tokens the classifier reads (the head of the prompt; rules read all of it)."""
    stream_context_chars: int = 48
    """Already-emitted characters kept as left context when scanning a stream (context words like `ssn`)."""
    stream_max_holdback_chars: int = 96
    """Most characters a StreamRedactor withholds; a longer unbroken run is scanned and released."""

    def __post_init__(self) -> None:
        if self.pii_engine not in PII_ENGINES:
            raise GuardrailConfigError(f"pii_engine={self.pii_engine!r} is not one of {list(PII_ENGINES)}")
        for name in ("spacy_model_path", "injection_model_path"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise GuardrailConfigError(f"{name}={value!r} must be a folder path or null")
        for name, low in (("injection_model_label", 0), ("injection_model_max_tokens", 8),
                          ("stream_context_chars", 0), ("stream_max_holdback_chars", 32)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise GuardrailConfigError(f"{name}={value!r} must be an integer >= {low}")

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> GuardrailsConfig:
        raw = raw or {}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise GuardrailConfigError(f"unknown guardrails config key(s) {unknown}; known keys: {sorted(known)}")
        return cls(**raw)
