"""Undo the cheap obfuscations attackers use to slip trigger phrases past rules: invisible characters, look-alike
letters from other scripts, full-width and mathematical letters, and s-p-a-c-e-d letters."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import regex

# Zero-width space/joiners, word joiner, invisible operators, BOM, soft hyphen, Mongolian vowel separator.
_INVISIBLE = regex.compile("[\u200b-\u200f\u2060-\u2064\ufeff\u00ad\u180e]")
# Cyrillic and Greek letters that render like Latin ones (the Unicode confusables most used in practice).
_HOMOGLYPHS = str.maketrans(
    {
        "а": "a",
        "е": "e",
        "о": "o",
        "р": "p",
        "с": "c",
        "у": "y",
        "х": "x",
        "і": "i",
        "ј": "j",
        "ѕ": "s",
        "ԁ": "d",
        "ɡ": "g",
        "һ": "h",
        "ӏ": "l",
        "ԛ": "q",
        "ԝ": "w",
        "А": "A",
        "В": "B",
        "Е": "E",
        "К": "K",
        "М": "M",
        "Н": "H",
        "О": "O",
        "Р": "P",
        "С": "C",
        "Т": "T",
        "Х": "X",
        "У": "Y",
        "І": "I",
        "Ј": "J",
        "Ѕ": "S",
        "α": "a",
        "ο": "o",
        "ν": "v",
        "ι": "i",
        "κ": "k",
        "ρ": "p",
        "τ": "t",
        "υ": "u",
        "χ": "x",
        "Α": "A",
        "Β": "B",
        "Ε": "E",
        "Ζ": "Z",
        "Η": "H",
        "Ι": "I",
        "Κ": "K",
        "Μ": "M",
        "Ν": "N",
        "Ο": "O",
        "Ρ": "P",
        "Τ": "T",
        "Υ": "Y",
        "Χ": "X",
    }
)
_MIXED_SCRIPT_WORD = regex.compile(r"\b(?=\w*\p{Latin})(?=\w*[\p{Cyrillic}\p{Greek}])\w+\b")
# "i g n o r e", "i.g.n.o.r.e", "i-g-n-o-r-e": five or more single letters with the same kind of separator.
_SPACED_LETTERS = regex.compile(r"\b\p{L}(?:[ .\-_*]\p{L}){4,}\b")
_SEPARATOR = regex.compile(r"[ .\-_*]")


@dataclass(frozen=True, slots=True)
class Normalized:
    text: str
    num_invisible_chars: int
    num_mixed_script_words: int
    num_spaced_runs: int
    unfolded: str
    """The text with invisible characters removed and NFKC applied but letters not mapped to Latin: rules for
    Cyrillic-script languages read this one."""


def normalize(text: str) -> Normalized:
    if text.isascii():  # the common case: nothing invisible, nothing to fold
        collapsed, num_spaced = _SPACED_LETTERS.subn(_join_letters, text)
        return Normalized(collapsed, 0, 0, num_spaced, text)
    stripped, num_invisible = _INVISIBLE.subn("", text)
    num_mixed = len(_MIXED_SCRIPT_WORD.findall(stripped))
    unfolded = unicodedata.normalize("NFKC", stripped)
    folded = unfolded.translate(_HOMOGLYPHS)
    collapsed, num_spaced = _SPACED_LETTERS.subn(_join_letters, folded)
    return Normalized(collapsed, num_invisible, num_mixed, num_spaced, unfolded)


def _join_letters(match: regex.Match) -> str:
    return _SEPARATOR.sub("", match[0])
