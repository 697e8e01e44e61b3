"""InjectionDetector: one score in [0, 1] per prompt from the rules (on normalized and decoded text) and, when
configured, a local classifier, the learned n-gram model (model.py) and the encoder (encoder/). They combine by max:
each is calibrated on its own (a score of 0.5 is its operating point).

With the encoder (a pretrained transformer fine-tuned here, which reads meaning), the encoder judges the text it
reads, and the rules count only where they see what it cannot: rules that fire on a decoded payload (base64, hex,
rot13...), on leetspeak folded or look-alike letters unfolded, but not on the text itself, and the two structural
checks (an adversarial suffix's token soup, a many-shot compliance transcript longer than the encoder's window). The
rules on the plain text and the n-gram model were the detector before the encoder: on writers nothing trained on
they catch 0.25 of attacks at 1.8% false positives, and OR-ed with the encoder they spent most of the 3% budget
for little recall (the encoder alone 0.79 of those writers' attacks at FPR 0.030, with them 0.65 at 0.025;
docs/benchmarks.md). Their rule names are still reported, for logs. The encoder costs ~6 ms for a 100-token prompt
on one core; `injection_encoder: false` runs the rules and the n-gram model alone (~0.4 ms).

Without the encoder: the rules catch the short direct injections they describe in any source, the n-gram model the
jailbreak templates no rule lists."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

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


class TextScorer(Protocol):
    """The encoder as the detector uses it (encoder.model.EncoderModel): a calibrated score, 0.5 its threshold."""

    def score(self, text: str) -> float: ...


@dataclass(frozen=True, slots=True)
class InjectionResult:
    score: float
    rules: tuple[str, ...]
    """Names of the rules that fired (plus `encoded_payload`, `invisible_chars`, `mixed_script`, `spaced_letters`,
    `adversarial_suffix`, `compliance_transcript`); safe to log."""
    model_score: float | None
    """The configured local classifier's score, if any."""
    learned_score: float | None = None
    """The n-gram model's, if it ran (configured, and no encoder)."""
    encoder_score: float | None = None
    """The encoder's, if configured."""


class InjectionDetector:
    def __init__(
        self,
        classifier: InjectionClassifier | None = None,
        model: InjectionModel | None = None,
        encoder: TextScorer | None = None,
    ) -> None:
        self.classifier = classifier
        self.model = model
        self.encoder = encoder

    def score(self, text: str) -> InjectionResult:
        normalized = normalize(text)
        plain = {rule.name: weight for rule, weight in rules.weighed_matches(normalized.text)}
        # Rules read in forms of the text the encoder does not see (it reads the normalized text).
        hidden: dict[str, float] = {}
        if normalized.unfolded != normalized.text:
            _add(hidden, rules.weighed_matches(normalized.unfolded))
        folded, leet_runs = fold_leetspeak(normalized.text.lower())
        if leet_runs >= _MIN_LEET_RUNS:
            _add(hidden, rules.weighed_matches(folded))
        for payload in decoded_payloads(normalized.text):
            matches = rules.weighed_matches(normalize(payload).text)
            decoded = [(rule, w) for rule, w in matches if rule.name not in plain and rule.name not in hidden]
            _add(hidden, decoded)
            if decoded:
                hidden["encoded_payload"] = rules.ENCODED_PAYLOAD_WEIGHT
        if has_adversarial_suffix(normalized.text):
            hidden["adversarial_suffix"] = rules.ADVERSARIAL_SUFFIX_WEIGHT
        if ends_in_compliance_transcript(normalized.text):
            hidden["compliance_transcript"] = rules.COMPLIANCE_TRANSCRIPT_WEIGHT
        unseen = {name: weight for name, weight in hidden.items() if name not in plain}  # not in what the encoder reads
        fired = dict(plain)
        _add_weights(fired, hidden)
        if normalized.num_invisible_chars:
            fired["invisible_chars"] = rules.INVISIBLE_CHARS_WEIGHT
        if normalized.num_mixed_script_words:
            fired["mixed_script"] = rules.MIXED_SCRIPT_WEIGHT
        if normalized.num_spaced_runs:
            fired["spaced_letters"] = rules.SPACED_LETTERS_WEIGHT
        model_score = self.classifier.score(text) if self.classifier is not None else None
        learned_score = encoder_score = None
        if self.encoder is not None:
            encoder_score = self.encoder.score(normalized.text)
            rule_score = rules.combine(list(unseen.values())) if unseen else 0.0
        else:
            rule_score = rules.combine(list(fired.values())) if len(fired) > _obfuscation_only(fired) else 0.0
            if self.model is not None:
                # The model's features from the text already normalized and folded above (its own `score` would do
                # both again).
                learned_score = self.model.score_features(featurize_folded(folded))
        score = max(rule_score, model_score or 0.0, learned_score or 0.0, encoder_score or 0.0)
        return InjectionResult(score, tuple(sorted(fired)), model_score, learned_score, encoder_score)


def _add(fired: dict[str, float], matches: list[tuple[Rule, float]]) -> None:
    """A rule read in another form of the text (unfolded, leetspeak-folded, decoded) counts at the most it weighed."""
    for rule, weight in matches:
        fired[rule.name] = max(weight, fired.get(rule.name, 0.0))


def _add_weights(fired: dict[str, float], weights: dict[str, float]) -> None:
    for name, weight in weights.items():
        fired[name] = max(weight, fired.get(name, 0.0))


def _obfuscation_only(fired: dict[str, float]) -> int:
    """Invisible characters or mixed scripts alone are common in benign text (copy-pasted web text, Cyrillic names);
    they only raise the score of a prompt where some rule fired."""
    return sum(name in ("invisible_chars", "mixed_script") for name in fired)
