"""Our recognizers beside Presidio's: secrets and names Presidio has no offline recognizer for, an offline email
validator and a case-insensitive IBAN recognizer.

Each is a Presidio recognizer, so both PII engines and Presidio's context enhancer treat them alike.
Patterns are case-sensitive (Presidio's default flags ignore case): key prefixes such as `AKIA` are.
"""

from __future__ import annotations

import base64
import binascii
import json

import guardrails.presidio_import  # noqa: F401  (before presidio/spacy: keeps torch out)

# isort: split

import regex
import tldextract
from presidio_analyzer import EntityRecognizer, Pattern, PatternRecognizer, RecognizerResult
from presidio_analyzer.nlp_engine import NlpArtifacts
from presidio_analyzer.predefined_recognizers import (
    CreditCardRecognizer,
    EmailRecognizer,
    IbanRecognizer,
    PhoneRecognizer,
)

from guardrails.ner.address import StreetAddressRecognizer
from guardrails.ner.recognizer import NerRecognizer

_CASE_SENSITIVE = regex.DOTALL | regex.MULTILINE

# An empty URL list makes tldextract use its bundled public-suffix snapshot; the default extractor that Presidio's
# EmailRecognizer calls fetches the list over the network on first use.
_OFFLINE_TLD = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


_LOCAL_PART_CHAR = r"[!$%'*+\-^_`{|}~\w]"


class OfflineEmailRecognizer(EmailRecognizer):
    """Presidio's email recognizer with three changes.

    - Its local part leaves out `/ ? # & = :`, which RFC 5322 allows but which in practice are the path or query
      around an address (`/users/jo@x.com`, `?email=jo@x.com`). Presidio's own pattern swallows them, and its
      domain check then reads `ops/jo@x.com` as a URL whose host is `ops`, dropping the address altogether.
    - The domain check runs on the domain alone, against the bundled suffix list (no network).
    - A match ends where the address does (`address_length`): the pattern runs on into a word glued to the domain,
      and Presidio's check then dropped the whole match (or kept the word, where it ended in a real suffix).
    """

    PATTERNS = [
        Pattern(
            "Email (Medium)",
            rf"\b(({_LOCAL_PART_CHAR})|({_LOCAL_PART_CHAR}(?:{_LOCAL_PART_CHAR}|\.)*{_LOCAL_PART_CHAR}))"
            r"[@]\w+(?:-+\w+)*(?:\.\w+(?:-+\w+)*)+\b",
            0.5,
        )
    ]

    def validate_result(self, pattern_text: str) -> bool:
        return address_length(pattern_text) is not None

    def analyze(
        self,
        text: str,
        entities: list[str],
        nlp_artifacts: NlpArtifacts | None = None,
        regex_flags: int | None = None,
    ) -> list[RecognizerResult]:
        results = super().analyze(text, entities, nlp_artifacts, regex_flags)
        for result in results:  # each validated: it holds an address, maybe with a glued word after it
            length = address_length(text[result.start : result.end])
            if length is not None:
                result.end = result.start + length
        return results


# Where a word glued to an address begins: a capital right after the lower-case domain, with or without a dot
# ("bob@example.orgThanks", "jane@acme.com.How"): two texts joined with nothing (content parts, a sentence's full stop
# then the next message). Domains are written in lower case; a capital after one starts the next word.
_GLUED_WORD = regex.compile(r"(?<=[a-z0-9])\.?(?=[A-Z])")


def address_length(match: str) -> int | None:
    """Characters of the email address at the start of an email pattern's match, or None when the suffix list knows no
    domain there: the domain cut where a glued word begins, else the longest run of its labels the list knows (the
    pattern runs on through "example.org.Thanks", whose last label is no suffix, or "example.com.how", whose is)."""
    local, _, domain = match.rpartition("@")
    candidates = []
    glued = _GLUED_WORD.search(domain, domain.find(".") + 1)
    if glued is not None and not any(c.isupper() for c in domain[: glued.start()]):
        candidates.append(domain[: glued.start()])
    labels = domain.split(".")
    candidates += [".".join(labels[:n]) for n in range(len(labels), 1, -1)]
    for candidate in candidates:
        if _OFFLINE_TLD(candidate).fqdn:
            return len(local) + 1 + len(candidate)
    return None


class CaseInsensitiveIbanRecognizer(IbanRecognizer):
    """Presidio's IBAN recognizer, also for lower-case IBANs ("de89 3704 0044 0532 0130 00"): its pattern is
    `[A-Z]` under case-sensitive flags and its checksum maps upper-case letters only. ISO 13616 prints IBANs in
    capitals, but people type them in lower case, and the mod-97 checksum keeps random words out all the same."""

    def __init__(self) -> None:
        super().__init__(regex_flags=regex.DOTALL | regex.MULTILINE | regex.IGNORECASE)

    def validate_result(self, pattern_text: str) -> bool | None:
        return super().validate_result(pattern_text.upper())


# Between a card's digit groups: what people (and attackers) type, up to three of them ("4111 - 1111").
_CARD_SEPARATOR = r"[\-./_ \t]{0,3}"


class SeparatedCardRecognizer(CreditCardRecognizer):
    """Presidio's card recognizer with more separators between the digit groups: dots, slashes, underscores, tabs
    and runs of up to three (`4111.1111.1111.1111`, `4111 / 1111 / ...`), still Luhn-checked. Presidio's pattern
    takes a single space or hyphen, so a dotted number reached the model in clear."""

    PATTERNS = [
        Pattern(
            "All Credit Cards (weak, any separator)",
            rf"\b(?!1\d{{12}}(?!\d))((4\d{{3}})|(5[0-5]\d{{2}})|(6\d{{3}})|(1\d{{3}})|(3\d{{3}})){_CARD_SEPARATOR}"
            rf"(\d{{3,4}}){_CARD_SEPARATOR}(\d{{3,4}}){_CARD_SEPARATOR}(\d{{3,5}})\b",
            0.3,
        ),
        # Diners Club's 14 digits in fours with two left over (`3056 9309 0259 04`), which the groups above cannot
        # end on: 4-6-4 and unbroken runs already parse there.
        Pattern(
            "Diners Club (4-4-4-2)",
            rf"\b3[0689]\d{{2}}(?:{_CARD_SEPARATOR}\d{{4}}){{2}}{_CARD_SEPARATOR}\d{{2}}\b",
            0.3,
        ),
    ]

    def __init__(self) -> None:
        super().__init__(
            patterns=self.PATTERNS,
            replacement_pairs=[("-", ""), (" ", ""), (".", ""), ("/", ""), ("_", ""), ("\t", "")],
        )


class ApiKeyRecognizer(PatternRecognizer):
    """Provider keys by their published prefixes, and the value of `api_key = ...`-style assignments."""

    PATTERNS = [
        Pattern("OpenAI/Anthropic key", r"\bsk-(?:[A-Za-z]+-)?[A-Za-z0-9_\-]{20,}", 0.9),
        Pattern("AWS access key id", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b", 0.9),
        Pattern("GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b", 0.9),
        Pattern("Slack token", r"\bxox[abprs]-[A-Za-z0-9\-]{10,}", 0.9),
        Pattern("Google API key", r"\bAIza[0-9A-Za-z_\-]{35}\b", 0.9),
        Pattern("Stripe key", r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}\b", 0.9),
        Pattern(
            "Secret assignment",
            r"(?<=(?i:api[_\-]?key|secret(?:[_\-]?key)?|access[_\-]?token|auth[_\-]?token|password|passwd)"
            r"[\"']?\s{0,3}[:=]\s{0,3}[\"']?)[A-Za-z0-9_\-/+=.!#$%^&*~]{12,}",
            0.6,
        ),
        # A connection string's password: `postgres://admin:S3cr3tPass@db:5432/app` (the user name stays).
        Pattern("Password in a URL", r"(?<=\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]+:)[^\s/@]{4,}(?=@)", 0.9),
    ]
    CONTEXT = ["key", "token", "secret", "api", "password", "credential"]

    def __init__(self) -> None:
        super().__init__(
            supported_entity="API_KEY",
            patterns=self.PATTERNS,
            context=self.CONTEXT,
            global_regex_flags=_CASE_SENSITIVE,
            name="ApiKeyRecognizer",
        )

    def validate_result(self, pattern_text: str) -> bool | None:
        # A random key mixes letters and digits; `password: correcthorsebattery` style words do not.
        has_digit = any(c.isdigit() for c in pattern_text)
        has_alpha = any(c.isalpha() for c in pattern_text)
        return None if has_digit and has_alpha else False


class JwtRecognizer(PatternRecognizer):
    """JSON Web Tokens: three base64url parts whose first decodes to a JSON header with `alg`."""

    PATTERNS = [Pattern("JWT", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}", 0.8)]

    def __init__(self) -> None:
        super().__init__(
            supported_entity="JWT",
            patterns=self.PATTERNS,
            context=["jwt", "token", "bearer"],
            global_regex_flags=_CASE_SENSITIVE,
            name="JwtRecognizer",
        )

    def validate_result(self, pattern_text: str) -> bool:
        header = pattern_text.split(".", 1)[0]
        try:
            decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
        except (binascii.Error, ValueError, UnicodeDecodeError):
            return False
        return isinstance(decoded, dict) and "alg" in decoded


class PrivateKeyRecognizer(PatternRecognizer):
    """PEM private key blocks (RSA, EC, OPENSSH, PKCS#8, encrypted), BEGIN line to END line."""

    BEGIN = r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----"
    PATTERNS = [Pattern("PEM private key", BEGIN + r".*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----", 1.0)]

    def __init__(self) -> None:
        super().__init__(
            supported_entity="PRIVATE_KEY",
            patterns=self.PATTERNS,
            global_regex_flags=_CASE_SENSITIVE,
            name="PrivateKeyRecognizer",
        )


def own_recognizers() -> list[EntityRecognizer]:
    """Ours: secrets, names/places/organizations (the shipped tagger, loaded on first use) and street addresses."""
    return [ApiKeyRecognizer(), JwtRecognizer(), PrivateKeyRecognizer(), NerRecognizer(), StreetAddressRecognizer()]


class RegionalPhoneRecognizer(PhoneRecognizer):
    """Presidio's phone recognizer over its default regions and Spain's, whose national numbers ("91 123 45 67",
    "612 34 56 78") none of them parses. On 4,014 benign texts with digits (the injection sets' benign prompts, EWT,
    WNUT-17) Spain added two findings, both US ZIP+4 codes ("78712-1179"), which are kept out here."""

    REGIONS = (*PhoneRecognizer.DEFAULT_SUPPORTED_REGIONS, "ES")
    _ZIP_PLUS_FOUR = regex.compile(r"\d{5}-\d{4}")

    def __init__(self) -> None:
        super().__init__(supported_regions=self.REGIONS)

    def analyze(
        self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None
    ) -> list[RecognizerResult]:
        results = super().analyze(text, entities, nlp_artifacts)  # type: ignore[arg-type]  # it reads none
        return [r for r in results if not self._ZIP_PLUS_FOUR.fullmatch(text, r.start, r.end)]
