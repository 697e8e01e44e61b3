"""Software, services, devices and formats (lists/products.txt) that the tagger takes for names: a span inside one
of these names is not PII ("in Excel" is not a place, "Matplotlib" not a person). Applied to the recognizer's
findings, after the tagger, so the tagger's own scores (model/scores.json) stay what its training measured.
"""

from __future__ import annotations

from functools import cache

import regex

from guardrails.ner.lists import LISTS_DIR

# Up to this many words on either side of a span are read, so that "Google" in "Google Docs" and "Excel" in
# "Microsoft Excel" fall inside a listed name; the longest entries have three words.
_CONTEXT_WORDS = 2
_WORD = regex.compile(r"\S+")


@cache
def product_names() -> frozenset[str]:
    lines = (LISTS_DIR / "products.txt").read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def inside_product_name(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] is a listed name or lies inside one with up to two words either side."""
    names = product_names()
    if text[start:end] in names:
        return True
    before = [m.start() for m in _WORD.finditer(text, max(0, start - 40), start)][-_CONTEXT_WORDS:]
    after = [m.end() for m in _WORD.finditer(text, end, end + 40)][:_CONTEXT_WORDS]
    return any(
        _strip(text[left:right]) in names
        for left in [*before, start]
        for right in [end, *after]
        if (left, right) != (start, end)
    )


def _strip(phrase: str) -> str:
    """A phrase read from running text, without the punctuation that ends a clause ("Google Docs," -> "Google
    Docs")."""
    return phrase.strip(".,;:!?()[]\"'")
