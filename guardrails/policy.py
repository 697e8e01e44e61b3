"""A tenant's guardrail policy: which detectors run and what they do, validated once when the tenant is loaded.

Example tenant policy dict (the keys `GuardrailPolicy.from_dict` accepts; every key is optional):

    {"pii_entities": ["EMAIL_ADDRESS", "CREDIT_CARD"], "pii_thresholds": {"PHONE_NUMBER": 0.6},
     "pii_action": "redact", "redaction_style": "placeholder", "output_pii_action": "redact",
     "injection_action": "block", "injection_threshold": 0.5}
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from guardrails.errors import GuardrailConfigError

PII_ACTIONS = ("off", "detect", "redact", "block")
INJECTION_ACTIONS = ("off", "detect", "block")
REDACTION_STYLES = ("placeholder", "mask")

# Entities with a checksum, a strict shape or a distinctive prefix: precise enough to act on by default.
DEFAULT_PII_ENTITIES = (
    "EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IBAN_CODE", "US_SSN", "IP_ADDRESS", "CRYPTO",
    "API_KEY", "JWT", "PRIVATE_KEY",
)
DEFAULT_SCORE_THRESHOLD = 0.4


@dataclass(frozen=True)
class GuardrailPolicy:
    pii_entities: tuple[str, ...] = DEFAULT_PII_ENTITIES
    """Entity types to look for, Presidio names plus ours (API_KEY, JWT, PRIVATE_KEY); PERSON/LOCATION need a
    spaCy NER model in GuardrailsConfig.spacy_model_path."""
    pii_thresholds: dict[str, float] = field(default_factory=dict)
    """Per-entity minimum score in [0, 1]; entities not named use `pii_default_threshold`."""
    pii_default_threshold: float = DEFAULT_SCORE_THRESHOLD
    """Minimum score for entities without their own threshold (Presidio scores: 1.0 checksum-valid, 0.4 phone...)."""
    pii_action: str = "off"
    """Input PII: off | detect (metrics and header only) | redact | block."""
    redaction_style: str = "placeholder"
    """placeholder: `<EMAIL_ADDRESS>`; mask: each character replaced by `*` (length kept)."""
    output_pii_action: str = "off"
    """Streamed/returned output PII: off | detect | redact | block (ends the stream with an error event)."""
    injection_action: str = "off"
    """Prompt injection: off | detect | block."""
    injection_threshold: float = 0.5
    """Injection score in [0, 1] at or above which a prompt counts as an injection."""

    def __post_init__(self) -> None:
        _check_choice("pii_action", self.pii_action, PII_ACTIONS)
        _check_choice("output_pii_action", self.output_pii_action, PII_ACTIONS)
        _check_choice("injection_action", self.injection_action, INJECTION_ACTIONS)
        _check_choice("redaction_style", self.redaction_style, REDACTION_STYLES)
        _check_unit("pii_default_threshold", self.pii_default_threshold)
        _check_unit("injection_threshold", self.injection_threshold)
        if isinstance(self.pii_entities, str) or not all(isinstance(e, str) and e for e in self.pii_entities):
            raise GuardrailConfigError(
                f"pii_entities must be a list of entity names such as ['EMAIL_ADDRESS'], got {self.pii_entities!r}")
        object.__setattr__(self, "pii_entities", tuple(dict.fromkeys(self.pii_entities)))
        if not isinstance(self.pii_thresholds, dict):
            raise GuardrailConfigError(f"pii_thresholds must map entity -> score, got {self.pii_thresholds!r}")
        for entity, score in self.pii_thresholds.items():
            _check_unit(f"pii_thresholds[{entity!r}]", score)

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> GuardrailPolicy:
        """Build from a tenant's policy dict; unknown keys are errors (a typo must not silently disable a check)."""
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise GuardrailConfigError(f"guardrail policy must be a mapping, got {type(raw).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise GuardrailConfigError(f"unknown guardrail policy key(s) {unknown}; known keys: {sorted(known)}")
        values = dict(raw)
        if "pii_entities" in values and isinstance(values["pii_entities"], list):
            values["pii_entities"] = tuple(values["pii_entities"])
        return cls(**values)

    @property
    def checks_input(self) -> bool:
        return self.pii_action != "off" or self.injection_action != "off"

    def threshold_for(self, entity: str) -> float:
        return self.pii_thresholds.get(entity, self.pii_default_threshold)


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise GuardrailConfigError(f"{name}={value!r} is not one of {list(choices)}")


def _check_unit(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise GuardrailConfigError(f"{name}={value!r} must be a number in [0, 1]")
