"""InjectionDetector: one score in [0, 1] per prompt from the rules (on normalized and decoded text) and, when
configured, a local classifier and the learned n-gram model (model.py). They combine by max: each is calibrated on its
own (a score of 0.5 is its operating point), the rules catch the short direct injections they describe in any source
and the model the jailbreak templates no rule lists. The gateway runs rules and the shipped model
(`injection_learned_model`); the model's threshold was picked for the pair, so their false positives together stay
within the validated 3% (docs/benchmarks.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from guardrails.injection import rules
from guardrails.injection.decode import decoded_payloads
from guardrails.injection.features import featurize_folded, fold_leetspeak
from guardrails.injection.normalize import normalize
from guardrails.injection.rule import Rule
from guardrails.injection.suffix import has_adversarial_suffix
from guardrails.injection.transcript import ends_in_compliance_transcript

if TYPE_CHECKING:  # the classifier imports torch; only deployments that configure one pay for it
    from guardrails.injection.classifier import InjectionClassifier
    from guardrails.injection.model import InjectionModel


# Words with digits for letters a prompt needs before the rules also read it folded ("1gn0r13r3 d31n3 4nw31sung3n"):
# a technical text has one or two ("mp3", "ipv4"), an attack written in leetspeak one in every word.
_MIN_LEET_RUNS = 3


@dataclass(frozen=True, slots=True)
class InjectionResult:
    score: float
    rules: tuple[str, ...]
    """Names of the rules that fired (plus `encoded_payload`, `invisible_chars`, `mixed_script`, `spaced_letters`,
    `adversarial_suffix`, `compliance_transcript`); safe to log."""
    model_score: float | None


class InjectionDetector:
    def __init__(self, classifier: InjectionClassifier | None = None, model: InjectionModel | None = None) -> None:
        self.classifier = classifier
        self.model = model

    def score(self, text: str) -> InjectionResult:
        normalized = normalize(text)
        fired = {rule.name: weight for rule, weight in rules.weighed_matches(normalized.text)}
        if normalized.unfolded != normalized.text:
            _add(fired, rules.weighed_matches(normalized.unfolded))
        folded, leet_runs = fold_leetspeak(normalized.text.lower())
        if leet_runs >= _MIN_LEET_RUNS:
            _add(fired, rules.weighed_matches(folded))
        for payload in decoded_payloads(normalized.text):
            hidden = [(rule, w) for rule, w in rules.weighed_matches(normalize(payload).text) if rule.name not in fired]
            _add(fired, hidden)
            if hidden:
                fired["encoded_payload"] = rules.ENCODED_PAYLOAD_WEIGHT
        if normalized.num_invisible_chars:
            fired["invisible_chars"] = rules.INVISIBLE_CHARS_WEIGHT
        if normalized.num_mixed_script_words:
            fired["mixed_script"] = rules.MIXED_SCRIPT_WEIGHT
        if normalized.num_spaced_runs:
            fired["spaced_letters"] = rules.SPACED_LETTERS_WEIGHT
        if has_adversarial_suffix(normalized.text):
            fired["adversarial_suffix"] = rules.ADVERSARIAL_SUFFIX_WEIGHT
        if ends_in_compliance_transcript(normalized.text):
            fired["compliance_transcript"] = rules.COMPLIANCE_TRANSCRIPT_WEIGHT
        rule_score = rules.combine(list(fired.values())) if len(fired) > _obfuscation_only(fired) else 0.0
        model_score = self.classifier.score(text) if self.classifier is not None else None
        # The model's features from the text already normalized and folded above (its own `score` would do both again).
        learned_score = self.model.score_features(featurize_folded(folded)) if self.model is not None else 0.0
        score = max(rule_score, model_score or 0.0, learned_score)
        return InjectionResult(score, tuple(sorted(fired)), model_score)


def _add(fired: dict[str, float], matches: list[tuple[Rule, float]]) -> None:
    """A rule read in another form of the text (unfolded, leetspeak-folded, decoded) counts at the most it weighed."""
    for rule, weight in matches:
        fired[rule.name] = max(weight, fired.get(rule.name, 0.0))


def _obfuscation_only(fired: dict[str, float]) -> int:
    """Invisible characters or mixed scripts alone are common in benign text (copy-pasted web text, Cyrillic names);
    they only raise the score of a prompt where some rule fired."""
    return sum(name in ("invisible_chars", "mixed_script") for name in fired)
