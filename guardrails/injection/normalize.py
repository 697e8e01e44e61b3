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
# "i g n o r e", "i.g.n.o.r.e", "i-g-n-o-r-e": five or more single letters with the same kind of separator. Words of
# a spaced sentence are set apart by a wider gap ("o l v i d a   t o d a s   l a s"): the run goes on across it, so
# its short words ("l a s") are joined too, and each gap becomes one space.
_SPACED_LETTERS = regex.compile(r"\b\p{L}(?:(?:[ .\-_*]|[ \t]{2,})\p{L}){4,}\b")
_WORD_GAP = regex.compile(r"[ \t]{2,}")
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
        collapsed, num_spaced = _join_spaced_letters(text)
        return Normalized(collapsed, 0, 0, num_spaced, text)
    stripped, num_invisible = _INVISIBLE.subn("", text)
    num_mixed = len(_MIXED_SCRIPT_WORD.findall(stripped))
    unfolded = unicodedata.normalize("NFKC", stripped)
    folded = unfolded.translate(_HOMOGLYPHS)
    collapsed, num_spaced = _join_spaced_letters(folded)
    return Normalized(collapsed, num_invisible, num_mixed, num_spaced, unfolded)


def _join_spaced_letters(text: str) -> tuple[str, int]:
    """The text with spaced-out words joined, and how many runs were; a run of lone letters set apart only by wide
    gaps ("A  B  C  D  E", a table's header) spells no word and stays as it is."""
    if not _SPACED_LETTERS.search(text):
        return text, 0
    parts: list[str] = []
    done, count = 0, 0
    for match in _SPACED_LETTERS.finditer(text):
        words = [_SEPARATOR.sub("", word) for word in _WORD_GAP.split(match[0])]
        if max(map(len, words)) < 2:
            continue
        parts += [text[done : match.start()], " ".join(words)]
        done, count = match.end(), count + 1
    return "".join(parts) + text[done:], count
