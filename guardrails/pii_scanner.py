"""PII detection with Presidio's recognizers, offline: the fast path and the full-analyzer path.

Both paths run the same Presidio recognizer objects and Presidio's own context enhancer; they differ in what they
skip. `AnalyzerEngine.analyze` tokenizes every text and runs every recognizer over all of it; phonenumbers alone
(eight regional matchers over the whole text) is ~2/3 of its ~10 ms for a 100-token prompt. The fast path:

  1. runs a recognizer only when its trigger is in the text (no `@`, no email; no digit, no SSN or card);
  2. runs the phone recognizer only on windows around digit runs, shifting spans back;
  3. tokenizes for context words only when some raw score is below its policy threshold, the only case where a
     context boost can change the outcome.

PERSON / LOCATION / ORGANIZATION come from the shipped tagger (guardrails/ner/), which reads capitalized stretches
and lower-case words that are known names, so its trigger is any letter; street addresses are patterns reported as
LOCATION. NRP (and, in addition, the three others) needs a spaCy NER model (GuardrailsConfig.spacy_model_path), run
on its own pipeline.
"""

from __future__ import annotations

from collections.abc import Iterable

import regex

import guardrails.presidio_import  # noqa: F401  (before presidio/spacy: keeps torch out)

# isort: split
from presidio_analyzer import AnalyzerEngine, EntityRecognizer, RecognizerRegistry, RecognizerResult
from presidio_analyzer import predefined_recognizers as stock
from presidio_analyzer.nlp_engine import NlpArtifacts

from guardrails.errors import GuardrailConfigError
from guardrails.findings import Finding, resolve_overlaps
from guardrails.nlp_engine import make_nlp_engine
from guardrails.policy import GuardrailPolicy
from guardrails.recognizers import (
    CaseInsensitiveIbanRecognizer,
    OfflineEmailRecognizer,
    RegionalPhoneRecognizer,
    SeparatedCardRecognizer,
    own_recognizers,
)

# What a spaCy NER model adds; without one, NRP is refused (the shipped tagger covers the other three).
SPACY_ENTITIES = frozenset({"PERSON", "LOCATION", "ORGANIZATION", "NRP"})
SPACY_ONLY_ENTITIES = frozenset({"NRP"})
_LETTER = regex.compile(r"\p{L}")
_DIGIT = regex.compile(r"\d")
# Entity -> a regex that must match somewhere for the entity's recognizers to be able to match at all.
# Entities not listed use _DIGIT.
_TRIGGERS: dict[str, regex.Pattern] = {
    "EMAIL_ADDRESS": regex.compile(r"@"),
    "URL": regex.compile(r"\w\.\w|://"),
    "IBAN_CODE": regex.compile(r"[A-Za-z]{2}\d{2}"),
    "IP_ADDRESS": regex.compile(r"\d\.\d|[0-9A-Fa-f]:[0-9A-Fa-f:]|::"),
    "CRYPTO": regex.compile(r"(?:bc1|[13])[a-zA-HJ-NP-Z0-9]{25}"),
    "API_KEY": regex.compile(
        r"sk-|AKIA|ASIA|ABIA|ACCA|gh[pousr]_|github_pat_|xox[abprs]-|AIza|_live_|_test_"
        r"|(?i:key|secret|token|passw)|://[^\s/@:]+:[^\s/@]+@"
    ),
    "JWT": regex.compile(r"eyJ"),
    "PRIVATE_KEY": regex.compile(r"PRIVATE KEY"),
    "CREDIT_CARD": regex.compile(r"\d(?:[\-./_ \t]{0,3}\d){11}"),
    "US_SSN": regex.compile(r"\d{3}"),
    "MAC_ADDRESS": regex.compile(r"[0-9A-Fa-f]{2}[:\-.][0-9A-Fa-f]{2}"),
    "UUID": regex.compile(r"[0-9A-Fa-f]{8}-"),
    "PERSON": _LETTER,
    "LOCATION": _LETTER,
    "ORGANIZATION": _LETTER,
}
# Digit runs a phone number could hide in: a `+` or `(` or a digit, then >= 5 more digits/separators, a digit.
_PHONE_CANDIDATE = regex.compile(r"[+(]?\d[\d \t().\-/]{5,}\d")
_PHONE_WINDOW_MARGIN_CHARS = 4
_PHONE_MIN_DIGITS = 6


def stock_recognizers() -> list[EntityRecognizer]:
    """Presidio's default English pattern recognizers (as its default registry loads them), email made offline,
    cards with any separator and phone numbers of Spain too (recognizers.py)."""
    return [
        SeparatedCardRecognizer(),
        stock.UsBankRecognizer(),
        stock.UsLicenseRecognizer(),
        stock.UsItinRecognizer(),
        stock.UsPassportRecognizer(),
        stock.UsSsnRecognizer(),
        stock.NhsRecognizer(),
        stock.CryptoRecognizer(),
        stock.DateRecognizer(),
        OfflineEmailRecognizer(),
        stock.IbanRecognizer(),
        stock.IpRecognizer(),
        stock.MedicalLicenseRecognizer(),
        stock.MacAddressRecognizer(),
        stock.UuidRecognizer(),
        RegionalPhoneRecognizer(),
        stock.UrlRecognizer(),
    ]


def build_analyzer(spacy_model_path: str | None) -> AnalyzerEngine:
    """A Presidio AnalyzerEngine that never touches the network: injected spaCy pipeline, offline email check."""
    nlp_engine = make_nlp_engine(spacy_model_path)
    recognizers = [
        CaseInsensitiveIbanRecognizer() if isinstance(r, stock.IbanRecognizer) else r for r in stock_recognizers()
    ] + own_recognizers()
    if spacy_model_path is not None:
        recognizers.append(stock.SpacyRecognizer(supported_entities=sorted(SPACY_ENTITIES)))
    registry = RecognizerRegistry(recognizers=recognizers, supported_languages=["en"])
    analyzer = AnalyzerEngine(registry=registry, nlp_engine=nlp_engine, supported_languages=["en"])
    # Patterns compile lazily on first use; compile them now, before request threads share the recognizers.
    analyzer.analyze("warm up 4111 1111 1111 1111 a@b.co +1 415 555 0132 sk-abc", language="en")
    return analyzer


class PiiScanner:
    """Finds PII in a text for a policy. Thread-safe: recognizers hold no per-call state once warmed up."""

    def __init__(self, analyzer: AnalyzerEngine, engine: str, has_ner_model: bool) -> None:
        self.analyzer = analyzer
        self.engine = engine
        self.has_ner_model = has_ner_model
        self.recognizers = [r for r in analyzer.registry.recognizers if not isinstance(r, stock.SpacyRecognizer)]
        self.spacy = next((r for r in analyzer.registry.recognizers if isinstance(r, stock.SpacyRecognizer)), None)
        self.supported_entities = frozenset(e for r in self.recognizers for e in r.supported_entities) | (
            SPACY_ENTITIES if has_ner_model else set()
        )
        # A `+` number names its country, so the default region does not matter; POSSIBLE (a plausible length for
        # that country) rather than VALID: a number outside the allocated ranges ("+41 (0)96 471 07 95", UK drama
        # numbers) is still somebody's phone number to a reader, and the `+` prefix already makes it phone-shaped.
        self._intl_phone = stock.PhoneRecognizer(supported_regions=("US",), leniency=0)
        self._by_entity = {
            e: [r for r in self.recognizers if e in r.supported_entities] for e in self.supported_entities
        }

    def check_policy(self, policy: GuardrailPolicy) -> None:
        unknown = sorted(set(policy.pii_entities) - self.supported_entities)
        if not unknown:
            return
        hint = "; NRP needs GuardrailsConfig.spacy_model_path" if set(unknown) & SPACY_ONLY_ENTITIES else ""
        raise GuardrailConfigError(
            f"pii_entities {unknown} are not supported{hint}; supported: {sorted(self.supported_entities)}"
        )

    def scan(self, text: str, policy: GuardrailPolicy) -> list[Finding]:
        """Non-overlapping findings at or above the policy's thresholds, ordered by start."""
        if not text:
            return []
        if self.engine == "presidio":
            results = self.analyzer.analyze(text, language="en", entities=list(policy.pii_entities))
        else:
            results = self._fast_results(text, policy)
        findings = [
            Finding(r.entity_type, r.start, r.end, r.score)
            for r in results
            if r.score >= policy.threshold_for(r.entity_type) and r.entity_type in policy.pii_entities
        ]
        return resolve_overlaps(findings)

    def _fast_results(self, text: str, policy: GuardrailPolicy) -> list[RecognizerResult]:
        results: list[RecognizerResult] = []
        ran: list[EntityRecognizer] = []
        entities = list(policy.pii_entities)
        # Phone last: its candidates already claimed by a stronger finding (a card, an IP) need no phonenumbers pass.
        for recognizer in sorted(
            self._recognizers_to_run(text, entities), key=lambda r: isinstance(r, stock.PhoneRecognizer)
        ):
            found = (
                self._phone_results(recognizer, text, results)
                if isinstance(recognizer, stock.PhoneRecognizer)
                else recognizer.analyze(text, entities=entities, nlp_artifacts=None)  # type: ignore[arg-type]  # presidio: None is documented, not annotated
            )
            if found:
                _tag(found, recognizer)
                results.extend(found)
                ran.append(recognizer)
        if any(r.score < policy.threshold_for(r.entity_type) for r in results):
            artifacts = self.analyzer.nlp_engine.process_text(text, "en")
            results = self._enhance_using_context(text, results, artifacts, ran)
        spacy_entities = [e for e in policy.pii_entities if e in SPACY_ENTITIES]
        if self.spacy is not None and spacy_entities:
            artifacts = self.analyzer.nlp_engine.process_text(text, "en")
            results.extend(self.spacy.analyze(text, spacy_entities, artifacts))
        return results

    def _enhance_using_context(
        self, text: str, results: list[RecognizerResult], artifacts: NlpArtifacts, ran: list[EntityRecognizer]
    ) -> list[RecognizerResult]:
        """Context scoring as `AnalyzerEngine.analyze` does it, through Presidio's public methods: each recognizer
        rescores its own results (seeing the others'), then the analyzer's context enhancer looks at nearby words."""
        key = RecognizerResult.RECOGNIZER_IDENTIFIER_KEY
        rescored: list[RecognizerResult] = []
        for recognizer in ran:
            own = [r for r in results if r.recognition_metadata[key] == recognizer.id]
            others = [r for r in results if r.recognition_metadata[key] != recognizer.id]
            rescored.extend(
                recognizer.enhance_using_context(
                    text=text, raw_recognizer_results=own, other_raw_recognizer_results=others, nlp_artifacts=artifacts
                )
            )
        return self.analyzer.context_aware_enhancer.enhance_using_context(
            text=text, raw_results=rescored, nlp_artifacts=artifacts, recognizers=ran
        )

    def _recognizers_to_run(self, text: str, entities: Iterable[str]) -> list[EntityRecognizer]:
        chosen: dict[int, EntityRecognizer] = {}
        has_digit = _DIGIT.search(text) is not None
        for entity in entities:
            trigger = _TRIGGERS.get(entity)
            if (trigger.search(text) is None) if trigger is not None else not has_digit:
                continue
            for recognizer in self._by_entity.get(entity, ()):
                chosen[id(recognizer)] = recognizer
        return list(chosen.values())

    def _phone_results(
        self, recognizer: stock.PhoneRecognizer, text: str, earlier: list[RecognizerResult]
    ) -> list[RecognizerResult]:
        results: dict[tuple[int, int], RecognizerResult] = {}
        for candidate in _PHONE_CANDIDATE.finditer(text):
            start, end = candidate.span()
            if _covered(start, end, earlier, recognizer.SCORE) or _count_digits(candidate[0]) < _PHONE_MIN_DIGITS:
                continue
            lo = max(0, start - _PHONE_WINDOW_MARGIN_CHARS)
            # An international number parses the same under every default region: one matcher pass, not eight.
            matcher = self._intl_phone if candidate[0].startswith("+") else recognizer
            window = text[lo : end + _PHONE_WINDOW_MARGIN_CHARS]
            for result in matcher.analyze(window, ["PHONE_NUMBER"], None):  # type: ignore[arg-type]  # as above
                result.start += lo
                result.end += lo
                results.setdefault((result.start, result.end), result)
        return list(results.values())


def _covered(start: int, end: int, results: list[RecognizerResult], below_score: float) -> bool:
    return any(r.start <= start and end <= r.end and r.score > below_score for r in results)


def _count_digits(text: str) -> int:
    return len(_DIGIT.findall(text))


def _tag(results: list[RecognizerResult], recognizer: EntityRecognizer) -> None:
    """Presidio's context enhancer keeps only results whose metadata names a recognizer it was given, by id.

    Overwritten, not defaulted: a `+` phone number comes from the private `_intl_phone` matcher, whose own id the
    enhancer does not know; it dropped the number whenever any other finding was scored for context."""
    for result in results:
        metadata = result.recognition_metadata or {}
        metadata[RecognizerResult.RECOGNIZER_IDENTIFIER_KEY] = recognizer.id
        metadata[RecognizerResult.RECOGNIZER_NAME_KEY] = recognizer.name  # type: ignore[has-type]  # presidio sets it in a branch
        result.recognition_metadata = metadata
