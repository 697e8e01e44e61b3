"""Street addresses as LOCATION: number + street name + street type, in US/UK, German, French and Spanish order.

Patterns rather than the tagger: an address has a fixed shape the tagger sees too rarely in its corpora, and a
pattern anchored on a street-type word ("Street", "-straße", "rue", "Calle") and a house number is precise. An
address goes on through an optional unit ("Apt 4B"), town, US state + ZIP, UK postcode, or 5-digit postcode + town.
"""

from __future__ import annotations

import guardrails.presidio_import  # noqa: F401  (before presidio/spacy: keeps torch out)

# isort: split

import regex
from presidio_analyzer import Pattern, PatternRecognizer, RecognizerResult
from presidio_analyzer.nlp_engine import NlpArtifacts

# Case-sensitive: a capital letter is what tells "12 Baker Street" from "12 more street food stalls".
_FLAGS = regex.DOTALL | regex.MULTILINE
_CAP = r"[\p{Lu}][\p{L}'’.\-]*"
_NAME = rf"{_CAP}(?:\s+(?:{_CAP}|de|del|la|las|los|du|des|von|van|der|den|dem|am|an|of))*?"
_US_UK_TYPES = (
    r"Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Way|Place|Pl|Square|Sq"
    r"|Terrace|Close|Crescent|Parkway|Pkwy|Highway|Hwy|Row|Gardens|Mews|Walk|Circle|Cir|Grove|Hill"
)
_DIRECTION = r"(?:\s+(?:N|S|E|W|NE|NW|SE|SW)\b)?"
_UNIT = r"(?:,?\s+(?:Apt|Apartment|Suite|Ste|Unit|Flat|Floor|#)\.?\s*[\w-]+)?"
_US_TAIL = r"(?:,\s*[\p{Lu}][\p{L}]+\b(?:\s[\p{Lu}][\p{L}]+\b)?(?:,?\s+[A-Z]{2}\b)?(?:\s+\d{5}(?:-\d{4})?)?)?"
_UK_POSTCODE = r"(?:,?\s+[A-Z]{1,2}\d[A-Z\d]?\s?\d[A-Z]{2}\b)?"
_EU_TAIL = r"(?:,\s*(?:[A-Z]-)?\d{4,5}\s+[\p{Lu}][\p{L}\-]+(?:\s[\p{Lu}][\p{L}\-]+)?)?"
_DE_SUFFIX = r"(?:straße|strasse|str\.|weg|allee|platz|gasse|ring|damm|ufer|chaussee|steig|pfad)"
_FR_TYPES = (
    r"(?:[Rr]ue|[Aa]venue|[Aa]v\.|[Bb]oulevard|[Bb]d|[Pp]lace|[Cc]hemin|[Aa]llée|[Ii]mpasse|[Qq]uai"
    r"|[Rr]oute|[Cc]ours)"
)
_FR_LINK = r"(?:(?:de\s+la|de\s+l['’]|du|des|de|d['’])\s*)?"
_ES_TYPES = r"(?:Calle|C/|Avenida|Avda\.?|Av\.|Plaza|Pza\.|Paseo|Camino|Carrera|Travesía|Ronda|Carretera)"
_ES_LINK = r"(?:(?:de\s+la|de\s+los|de\s+las|del|de)\s+)?"

# Above the tagger's 0.85: when the tagger marks only the town of an address, the whole address must win the overlap.
_SCORE = 0.9
PATTERNS = [
    Pattern(
        "US/UK street address",
        rf"\b\d{{1,5}}[A-Za-z]?(?:[-–]\d{{1,5}})?,?\s+{_NAME}\s+(?:{_US_UK_TYPES})\b\.?{_DIRECTION}{_UNIT}{_US_TAIL}{_UK_POSTCODE}",
        _SCORE,
    ),
    Pattern(
        "German street address",
        rf"\b(?:{_CAP}{_DE_SUFFIX}|{_NAME}\s+(?:Straße|Strasse|Str\.|Weg|Allee|Platz|Gasse|Ring|Damm))"
        rf"\s+\d{{1,4}}\s?[a-z]?\b{_EU_TAIL}",
        _SCORE,
    ),
    Pattern(
        "French street address",
        rf"\b\d{{1,4}}(?:\s?(?:bis|ter))?,?\s+{_FR_TYPES}\s+{_FR_LINK}{_NAME}{_EU_TAIL}",
        _SCORE,
    ),
    Pattern(
        "Spanish street address",
        rf"(?<!\w){_ES_TYPES}\s+{_ES_LINK}{_NAME},?\s+(?:n[º°o]\.?\s*)?\d{{1,4}}\b{_EU_TAIL}",
        _SCORE,
    ),
]


# Every pattern needs a house number and one of these words; most texts lack one, and the patterns (which try each
# number and each capitalized word as a start) then cost nothing. German street words end a compound ("Hauptstraße").
_STREET_WORD = regex.compile(
    rf"\b(?:{_US_UK_TYPES})\b|(?:stra(?:ß|ss)e|str\.|weg|allee|platz|gasse|ring|damm|ufer|chaussee|steig|pfad)\b"
    rf"|\b{_FR_TYPES}\b|(?<!\w){_ES_TYPES}",
    regex.IGNORECASE,
)
_DIGIT = regex.compile(r"\d")


class StreetAddressRecognizer(PatternRecognizer):
    def analyze(
        self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None, regex_flags: int | None = None
    ) -> list[RecognizerResult]:
        if _DIGIT.search(text) is None or _STREET_WORD.search(text) is None:
            return []
        return super().analyze(text, entities, nlp_artifacts, regex_flags)

    def __init__(self) -> None:
        super().__init__(
            supported_entity="LOCATION",
            patterns=PATTERNS,
            global_regex_flags=_FLAGS,
            name="StreetAddressRecognizer",
            context=["address", "live", "lives", "street", "adresse", "dirección", "ship", "deliver"],
        )
