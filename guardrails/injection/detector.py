"""InjectionDetector: one score in [0, 1] per prompt from the rules (on normalized and decoded text) and, when
configured, a local classifier, the learned n-gram model (model.py) and the encoder (encoder/). They combine by max:
each is calibrated on its own (a score of 0.5 is its operating point). The rules catch the short direct injections
they describe in any source, the n-gram model the jailbreak templates no rule lists, and the encoder, a pretrained
transformer fine-tuned here, the paraphrases and new framings that neither has seen (it reads meaning; on writers
nothing trained on it doubles the pair's recall: 0.25 -> 0.52 at 2.3% false positives, docs/benchmarks.md). The
gateway runs all three (`injection_learned_model`, `injection_encoder`); each threshold was picked for the detector as
a whole, so their false positives together stay within the validated 3%.

The encoder costs ~18 ms for a 100-token prompt on two cores against ~0.4 ms for the rest, so it runs only where the
n-gram model sees some sign of an attack (ENCODER_GATE)."""

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
    from guardrails.injection.encoder.model import EncoderModel
    from guardrails.injection.model import InjectionModel


# Words with digits for letters a prompt needs before the rules also read it folded ("1gn0r13r3 d31n3 4nw31sung3n"):
# a technical text has one or two ("mp3", "ipv4"), an attack written in leetspeak one in every word.
_MIN_LEET_RUNS = 3
# The n-gram model's score (calibrated: 0.5 is its own operating point) below which the encoder is not run. On the
# held-out red-team writers (g-i) the gate passes 78% of attacks and 47% of benign prompts written to look like
# attacks. It costs no recall at equal false positives: with the encoder's threshold picked anew for each gate on
# the validation writers, gates of 0 to 0.2 caught the same share of g-i (0.50 of 450, FPR 0.028; 2026-12-06), and
# the encoder is not paid on every prompt. Short ordinary requests mostly score below it (2% of the
# XQuAD questions pass), pasted documents mostly above (docs/benchmarks.md).
ENCODER_GATE = 0.2


@dataclass(frozen=True, slots=True)
class InjectionResult:
    score: float
    rules: tuple[str, ...]
    """Names of the rules that fired (plus `encoded_payload`, `invisible_chars`, `mixed_script`, `spaced_letters`,
    `adversarial_suffix`, `compliance_transcript`); safe to log."""
    model_score: float | None
    """The configured local classifier's score, if any."""
    learned_score: float | None = None
    """The n-gram model's, if it ran."""
    encoder_score: float | None = None
    """The encoder's, if it ran (configured, and the n-gram model's score at ENCODER_GATE or above)."""


class InjectionDetector:
    def __init__(
        self,
        classifier: InjectionClassifier | None = None,
        model: InjectionModel | None = None,
        encoder: EncoderModel | None = None,
    ) -> None:
        self.classifier = classifier
        self.model = model
        self.encoder = encoder

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
        learned_score = self.model.score_features(featurize_folded(folded)) if self.model is not None else None
        encoder_score = None
        if self.encoder is not None and (learned_score is None or learned_score >= ENCODER_GATE):
            encoder_score = self.encoder.score(normalized.text)
        score = max(rule_score, model_score or 0.0, learned_score or 0.0, encoder_score or 0.0)
        return InjectionResult(score, tuple(sorted(fired)), model_score, learned_score, encoder_score)


def _add(fired: dict[str, float], matches: list[tuple[Rule, float]]) -> None:
    """A rule read in another form of the text (unfolded, leetspeak-folded, decoded) counts at the most it weighed."""
    for rule, weight in matches:
        fired[rule.name] = max(weight, fired.get(rule.name, 0.0))


def _obfuscation_only(fired: dict[str, float]) -> int:
    """Invisible characters or mixed scripts alone are common in benign text (copy-pasted web text, Cyrillic names);
    they only raise the score of a prompt where some rule fired."""
    return sum(name in ("invisible_chars", "mixed_script") for name in fired)
