"""PII detection with Presidio's recognizers, offline: the fast path and the full-analyzer path.

Both paths run the same Presidio recognizer objects and Presidio's own context enhancer; they differ in what they
skip. `AnalyzerEngine.analyze` tokenizes every text and runs every recognizer over all of it; phonenumbers alone
(eight regional matchers over the whole text) is ~2/3 of its ~10 ms for a 100-token prompt. The fast path:

  1. runs a recognizer only when its trigger is in the text (no `@`, no email; no digit, no SSN or card);
  2. runs the phone recognizer only on windows around digit runs, shifting spans back;
  3. tokenizes for context words only when some raw score is below its policy threshold, the only case where a
     context boost can change the outcome.

PERSON / LOCATION / ORGANIZATION / NRP come from a spaCy NER model (GuardrailsConfig.spacy_model_path) through the
analyzer in both paths: there is no cheap trigger for a name.
"""

from __future__ import annotations

from collections.abc import Iterable

import regex

import guardrails.presidio_import  # noqa: F401  (before presidio/spacy: keeps torch out)
from presidio_analyzer import AnalyzerEngine, EntityRecognizer, RecognizerRegistry, RecognizerResult
from presidio_analyzer import predefined_recognizers as stock

from guardrails.errors import GuardrailConfigError
from guardrails.findings import Finding, resolve_overlaps
from guardrails.nlp_engine import make_nlp_engine
from guardrails.policy import GuardrailPolicy
from guardrails.recognizers import OfflineEmailRecognizer, own_recognizers

NER_ENTITIES = frozenset({"PERSON", "LOCATION", "ORGANIZATION", "NRP"})
_DIGIT = regex.compile(r"\d")
# Entity -> a regex that must match somewhere for the entity's recognizers to be able to match at all.
# Entities not listed use _DIGIT.
_TRIGGERS: dict[str, regex.Pattern] = {
    "EMAIL_ADDRESS": regex.compile(r"@"),
    "URL": regex.compile(r"\w\.\w|://"),
    "IBAN_CODE": regex.compile(r"[A-Za-z]{2}\d{2}"),
    "IP_ADDRESS": regex.compile(r"\d\.\d|[0-9A-Fa-f]:[0-9A-Fa-f:]|::"),
    "CRYPTO": regex.compile(r"(?:bc1|[13])[a-zA-HJ-NP-Z0-9]{25}"),
    "API_KEY": regex.compile(r"sk-|AKIA|ASIA|ABIA|ACCA|gh[pousr]_|github_pat_|xox[abprs]-|AIza|_live_|_test_"
                             r"|(?i:key|secret|token|passw)"),
    "JWT": regex.compile(r"eyJ"),
    "PRIVATE_KEY": regex.compile(r"PRIVATE KEY"),
    "CREDIT_CARD": regex.compile(r"\d(?:[ \-]?\d){11}"),
    "US_SSN": regex.compile(r"\d{3}"),
    "MAC_ADDRESS": regex.compile(r"[0-9A-Fa-f]{2}[:\-.][0-9A-Fa-f]{2}"),
    "UUID": regex.compile(r"[0-9A-Fa-f]{8}-"),
}
# Digit runs a phone number could hide in: a `+` or `(` or a digit, then >= 5 more digits/separators, a digit.
_PHONE_CANDIDATE = regex.compile(r"[+(]?\d[\d \t().\-/]{5,}\d")
_PHONE_WINDOW_MARGIN_CHARS = 4
_PHONE_MIN_DIGITS = 6


def stock_recognizers() -> list[EntityRecognizer]:
    """Presidio's default English pattern recognizers (as its default registry loads them), email made offline."""
    return [
        stock.CreditCardRecognizer(), stock.UsBankRecognizer(), stock.UsLicenseRecognizer(),
        stock.UsItinRecognizer(), stock.UsPassportRecognizer(), stock.UsSsnRecognizer(), stock.NhsRecognizer(),
        stock.CryptoRecognizer(), stock.DateRecognizer(), OfflineEmailRecognizer(), stock.IbanRecognizer(),
        stock.IpRecognizer(), stock.MedicalLicenseRecognizer(), stock.MacAddressRecognizer(),
        stock.UuidRecognizer(), stock.PhoneRecognizer(), stock.UrlRecognizer(),
    ]


def build_analyzer(spacy_model_path: str | None) -> AnalyzerEngine:
    """A Presidio AnalyzerEngine that never touches the network: injected spaCy pipeline, offline email check."""
    nlp_engine = make_nlp_engine(spacy_model_path)
    recognizers = stock_recognizers() + own_recognizers()
    if spacy_model_path is not None:
        recognizers.append(stock.SpacyRecognizer(supported_entities=sorted(NER_ENTITIES)))
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
        self.supported_entities = frozenset(
            e for r in self.recognizers for e in r.supported_entities) | (NER_ENTITIES if has_ner_model else set())
        self._intl_phone = stock.PhoneRecognizer(supported_regions=("US",))
        self._by_entity = {e: [r for r in self.recognizers if e in r.supported_entities]
                           for e in self.supported_entities}

    def check_policy(self, policy: GuardrailPolicy) -> None:
        unknown = sorted(set(policy.pii_entities) - self.supported_entities)
        if not unknown:
            return
        hint = ("; PERSON/LOCATION/ORGANIZATION/NRP need GuardrailsConfig.spacy_model_path"
                if set(unknown) & NER_ENTITIES else "")
        raise GuardrailConfigError(
            f"pii_entities {unknown} are not supported{hint}; supported: {sorted(self.supported_entities)}")

    def scan(self, text: str, policy: GuardrailPolicy) -> list[Finding]:
        """Non-overlapping findings at or above the policy's thresholds, ordered by start."""
        if not text:
            return []
        if self.engine == "presidio":
            results = self.analyzer.analyze(text, language="en", entities=list(policy.pii_entities))
        else:
            results = self._fast_results(text, policy)
        findings = [Finding(r.entity_type, r.start, r.end, r.score) for r in results
                    if r.score >= policy.threshold_for(r.entity_type) and r.entity_type in policy.pii_entities]
        return resolve_overlaps(findings)

    def _fast_results(self, text: str, policy: GuardrailPolicy) -> list[RecognizerResult]:
        results: list[RecognizerResult] = []
        ran: list[EntityRecognizer] = []
        pattern_entities = [e for e in policy.pii_entities if e not in NER_ENTITIES]
        # Phone last: its candidates already claimed by a stronger finding (a card, an IP) need no phonenumbers pass.
        for recognizer in sorted(self._recognizers_to_run(text, pattern_entities),
                                 key=lambda r: isinstance(r, stock.PhoneRecognizer)):
            found = (self._phone_results(recognizer, text, results) if isinstance(recognizer, stock.PhoneRecognizer)
                     else recognizer.analyze(text, entities=pattern_entities, nlp_artifacts=None))
            if found:
                _tag(found, recognizer)
                results.extend(found)
                ran.append(recognizer)
        if any(r.score < policy.threshold_for(r.entity_type) for r in results):
            artifacts = self.analyzer.nlp_engine.process_text(text, "en")
            results = self.analyzer._enhance_using_context(text, results, artifacts, ran)
        ner_entities = [e for e in policy.pii_entities if e in NER_ENTITIES]
        if ner_entities:
            results.extend(self.analyzer.analyze(text, language="en", entities=ner_entities))
        return results

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

    def _phone_results(self, recognizer: stock.PhoneRecognizer, text: str,
                       earlier: list[RecognizerResult]) -> list[RecognizerResult]:
        results: dict[tuple[int, int], RecognizerResult] = {}
        for candidate in _PHONE_CANDIDATE.finditer(text):
            start, end = candidate.span()
            if _covered(start, end, earlier, recognizer.SCORE) or _count_digits(candidate[0]) < _PHONE_MIN_DIGITS:
                continue
            lo = max(0, start - _PHONE_WINDOW_MARGIN_CHARS)
            # An international number parses the same under every default region: one matcher pass, not eight.
            matcher = self._intl_phone if candidate[0].startswith("+") else recognizer
            for result in matcher.analyze(text[lo:end + _PHONE_WINDOW_MARGIN_CHARS], ["PHONE_NUMBER"], None):
                result.start += lo
                result.end += lo
                results.setdefault((result.start, result.end), result)
        return list(results.values())


def _covered(start: int, end: int, results: list[RecognizerResult], below_score: float) -> bool:
    return any(r.start <= start and end <= r.end and r.score > below_score for r in results)


def _count_digits(text: str) -> int:
    return len(_DIGIT.findall(text))


def _tag(results: list[RecognizerResult], recognizer: EntityRecognizer) -> None:
    """Presidio's context enhancer finds a result's recognizer by id in its metadata (analyze() adds it)."""
    for result in results:
        metadata = result.recognition_metadata or {}
        metadata.setdefault(RecognizerResult.RECOGNIZER_IDENTIFIER_KEY, recognizer.id)
        metadata.setdefault(RecognizerResult.RECOGNIZER_NAME_KEY, recognizer.name)
        result.recognition_metadata = metadata
