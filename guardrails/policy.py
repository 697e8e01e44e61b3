"""A tenant's guardrail policy: which detectors run and what they do, validated once when the tenant is loaded.

Example tenant policy dict (the keys `GuardrailPolicy.from_dict` accepts; every key is optional):

    {"pii_entities": ["EMAIL_ADDRESS", "CREDIT_CARD"], "pii_thresholds": {"PHONE_NUMBER": 0.6},
     "pii_action": "redact", "redaction_style": "placeholder", "output_pii_action": "redact",
     "injection_action": "block", "injection_threshold": 0.5}
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError

from guardrails.errors import GuardrailConfigError
from sluicegate.schema import Schema, Tuple, explain


def _yaml_off(value: Any) -> Any:
    # YAML 1.1 reads a bare `off` as false: `injection_action: off` in a config file means "off", not a type error.
    return "off" if value is False else value


PiiAction = Annotated[Literal["off", "detect", "redact", "block"], BeforeValidator(_yaml_off)]
InjectionAction = Annotated[Literal["off", "detect", "block"], BeforeValidator(_yaml_off)]
RedactionStyle = Literal["placeholder", "mask"]
Score = Annotated[float, Field(ge=0.0, le=1.0)]

# Entities with a checksum, a strict shape or a distinctive prefix: precise enough to act on by default.
DEFAULT_PII_ENTITIES = (
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "IBAN_CODE",
    "US_SSN",
    "IP_ADDRESS",
    "CRYPTO",
    "API_KEY",
    "JWT",
    "PRIVATE_KEY",
)
DEFAULT_SCORE_THRESHOLD = 0.4
DEFAULT_INJECTION_THRESHOLD = 0.5  # the shipped model's score is calibrated so its operating point lands here


def _unique(entities: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(entities))


class GuardrailPolicy(Schema):
    # Any entity name is accepted here: which ones exist depends on the recognizers loaded (Guardrails.check_policy).
    pii_entities: Annotated[tuple[Annotated[str, Field(min_length=1)], ...], Tuple, AfterValidator(_unique)] = (
        DEFAULT_PII_ENTITIES
    )
    """Entity types to look for, Presidio names plus ours (API_KEY, JWT, PRIVATE_KEY). PERSON, LOCATION (street
    addresses included) and ORGANIZATION come from the shipped tagger: not on by default, since a name is less
    certain than a checksum; NRP needs a spaCy NER model in GuardrailsConfig.spacy_model_path."""
    pii_thresholds: dict[str, Score] = {}
    """Per-entity minimum score in [0, 1]; entities not named use `pii_default_threshold`."""
    pii_default_threshold: Score = DEFAULT_SCORE_THRESHOLD
    """Minimum score for entities without their own threshold (Presidio scores: 1.0 checksum-valid, 0.4 phone...)."""
    pii_action: PiiAction = "off"
    """Input PII: off | detect (counted in sluicegate_guardrail_findings_total only) | redact | block."""
    redaction_style: RedactionStyle = "placeholder"
    """placeholder: `<EMAIL_ADDRESS>`; mask: each character replaced by `*` (length kept)."""
    output_pii_action: PiiAction = "off"
    """Streamed/returned output PII: off | detect | redact | block (ends the stream with an error event)."""
    injection_action: InjectionAction = "off"
    """Prompt injection: off | detect | block."""
    injection_threshold: Score = DEFAULT_INJECTION_THRESHOLD
    """Injection score in [0, 1] at or above which a prompt counts as an injection."""
    injection_alongside: bool = False
    """Score injection while the request goes upstream instead of before: the answer is held until the score is in,
    and a blocked request is cancelled at its replica (its connection closed) before any of the answer reaches the
    client, and charged nothing (its tokens; it is admitted first, so it takes its place in the request bucket and
    concurrency, and near a limit gets the 429 first). The check's time (~6 ms with the encoder) hides under routing
    and the replica's queue and prefill; the cost is that a blocked prompt reaches a replica, which starts on it.
    With `detect`, nothing waits for the check. Off: a blocked prompt never leaves the gateway."""

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None, path: str = "") -> GuardrailPolicy:
        """Build from a tenant's policy dict; unknown keys are errors (a typo must not silently disable a check).
        `path`: where the dict sits in its file ("guardrails.policies.strict"), so the error names the line to fix."""
        try:
            return cls.model_validate({} if raw is None else raw)
        except ValidationError as exc:
            raise GuardrailConfigError(explain(exc, path)) from None

    @property
    def checks_input(self) -> bool:
        return self.pii_action != "off" or self.injection_action != "off"

    def threshold_for(self, entity: str) -> float:
        return self.pii_thresholds.get(entity, self.pii_default_threshold)
