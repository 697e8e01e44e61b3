"""Tokenization with character offsets, and BIO tags over tokens."""

from __future__ import annotations

from dataclasses import dataclass

import regex

# Words keep inner hyphens, dots and ampersands ("Jean-Pierre", "U.S", "AT&T"); an apostrophe starts a new token so
# "Obama's" is "Obama" + "'s" (the possessive is not part of the name) and "O'Brien" is "O" + "'Brien".
# "@handle" and "#tag" stay whole: they are not names, and must not teach the tagger that the word after "@" is one.
_TOKEN = regex.compile(r"[@#]\w+|\w+(?:[-.&]\w+)*|['’]\w*|[^\w\s]")

ENTITY_TYPES = ("PERSON", "LOCATION", "ORGANIZATION")
TAGS = ("O",) + tuple(f"{p}-{t}" for t in ENTITY_TYPES for p in ("B", "I"))
TAG_INDEX = {tag: i for i, tag in enumerate(TAGS)}


@dataclass(frozen=True, slots=True)
class Token:
    text: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int
    entity: str


def tokenize(text: str) -> list[Token]:
    return [Token(m[0], m.start(), m.end()) for m in _TOKEN.finditer(text)]


def spans_to_tags(tokens: list[Token], spans: list[Span]) -> list[int]:
    """BIO tag index per token; a token counts as inside a span when it overlaps it (a span ending mid-token, as
    "Obama" in German "Obamas", still tags the token)."""
    tags = [0] * len(tokens)
    for span in spans:
        inside = [i for i, t in enumerate(tokens) if t.start < span.end and span.start < t.end]
        for k, i in enumerate(inside):
            tags[i] = TAG_INDEX[("B-" if k == 0 else "I-") + span.entity]
    return tags


def tags_to_spans(tokens: list[Token], tags: list[int], text: str = "") -> list[Span]:
    """Spans of the BIO tags; with `text`, a span also ends at a line break: no name runs from one line of a
    signature or an address block into the next ("Acme GmbH" / "Munich")."""
    spans: list[Span] = []
    current: list[int] | None = None  # [start, end, type index]
    for token, tag in zip(tokens, tags):
        name = TAGS[tag]
        new_line = current is not None and "\n" in text[current[1] : token.start]
        if name == "O" or name.startswith("B-") or current is None or name[2:] != ENTITY_TYPES[current[2]] or new_line:
            if current is not None:
                spans.append(Span(current[0], current[1], ENTITY_TYPES[current[2]]))
                current = None
            if name != "O":
                current = [token.start, token.end, ENTITY_TYPES.index(name[2:])]
        else:
            current[1] = token.end
    if current is not None:
        spans.append(Span(current[0], current[1], ENTITY_TYPES[current[2]]))
    return spans
