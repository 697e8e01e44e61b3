"""What an input check decided, in a form the gateway can act on, log and put in a header without any PII."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from guardrails.errors import GuardrailBlocked
from guardrails.findings import Finding

ACTIONS = ("allow", "detect", "redact", "block")


@dataclass(frozen=True)
class InputVerdict:
    action: str
    """allow (nothing found or all checks off) | detect | redact | block."""
    texts: tuple[str, ...]
    """The texts to forward: redacted where the action is `redact`, else the originals."""
    findings: tuple[tuple[Finding, ...], ...]
    """Per text, the PII found (offsets into the original text); an entity split across texts has a piece in each,
    all but the first marked `continuation`."""
    injection_score: float
    """Highest injection score over the texts; 0.0 when the injection check is off."""
    injection_rules: tuple[str, ...]
    """Names of the injection rules that fired, across texts."""
    blocked_reason: str | None = None
    """"pii" or "prompt_injection" when `action == "block"`."""

    @property
    def blocked(self) -> bool:
        return self.action == "block"

    def entity_counts(self) -> dict[str, int]:
        return dict(Counter(f.entity for per_text in self.findings for f in per_text if not f.continuation))

    def raise_if_blocked(self) -> None:
        if self.blocked:
            entities = tuple(sorted(self.entity_counts())) if self.blocked_reason == "pii" else ()
            raise GuardrailBlocked(self.blocked_reason or "policy", entities)
