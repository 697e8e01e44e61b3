"""Process-wide guardrail settings (GuardrailsConfig), validated once at start-up; tenant choices live in policy.py."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from guardrails.errors import GuardrailConfigError
from sluicegate.schema import Path, Schema, explain


class GuardrailsConfig(Schema):
    pii_engine: Literal["fast", "presidio"] = "fast"
    """fast: Presidio's recognizers called directly, each only when a cheap trigger (a digit, an `@`, a key prefix)
    is present, phonenumbers only on digit runs, context words scored by Presidio's enhancer only when a score is
    below its threshold. presidio: the full `AnalyzerEngine.analyze` on every text (slower, same recognizers)."""
    spacy_model_path: Path | None = None
    """A local spaCy pipeline folder with NER (e.g. an unpacked en_core_web_sm); enables NRP, and adds its PERSON,
    LOCATION and ORGANIZATION to the shipped tagger's (guardrails/ner/). None: a blank English pipeline, nothing
    downloaded."""
    injection_learned_model: bool = True
    """Without the encoder, score prompts with the shipped n-gram model (guardrails/injection/model.npz) besides the
    rules; a prompt is an injection when either says so. False: the rules alone (fewer false positives on
    security-topic requests, far less recall on jailbreak templates: docs/benchmarks.md). Not used with the
    encoder."""
    injection_encoder: bool = True
    """Judge every prompt with the shipped encoder (guardrails/injection/encoder/: a small pretrained transformer
    fine-tuned here, int8 in ONNX Runtime on the CPU), the rules counting only where they read what it cannot (decoded
    payloads, leetspeak, look-alike letters, adversarial suffixes, many-shot transcripts). It catches four times the
    attacks of the rules and the n-gram model on writers the detector never saw, at ~6 ms for a 100-token prompt on
    one core (docs/benchmarks.md). False: the rules and the n-gram model alone, ~0.4 ms."""
    injection_model_path: Path | None = None
    """A local transformers sequence-classification folder; its injection probability is combined with the rules."""
    injection_model_label: Annotated[int, Field(ge=0)] = 1
    """Index of the classifier's `injection` label."""
    injection_model_max_tokens: Annotated[int, Field(ge=8)] = 256
    """Prompt tokens the classifier reads (the head of the prompt; rules read all of it)."""
    stream_context_chars: Annotated[int, Field(ge=0)] = 48
    """Already-emitted characters kept as left context when scanning a stream (context words like `ssn`)."""
    stream_max_holdback_chars: Annotated[int, Field(ge=32)] = 96
    """Most characters a StreamRedactor withholds; a longer unbroken run is scanned and released."""

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None, path: str = "") -> GuardrailsConfig:
        """`path`: where the dict sits in its file ("guardrails.engine"), for the error message."""
        try:
            return cls.model_validate(raw or {})
        except ValidationError as exc:
            raise GuardrailConfigError(explain(exc, path)) from None
