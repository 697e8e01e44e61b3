"""The word lists in lists/: names, places, organizations, street words.

Each list is split once, by a stable hash of the entry, into a train part (the names the training templates use) and a
held-out part (used only in the template test sentences), so the synthetic test measures names the tagger never saw
in a training sentence, in templates it never saw. The gazetteer feature holds every entry of both parts: a name list
is knowledge the shipped tagger should have whole (leaving a fifth of the census names out of it cost 2-4 points of
recall on the held-out web text), so the template test is of known names in unseen phrasings, and the held-out
corpora (corpus.HELD_OUT_SOURCES), whose names no list was built from, are the test of names never seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import xxhash

LISTS_DIR = Path(__file__).parent / "lists"
# Generated from public name and place data by import_lists.py; these lists' entries are their hand-written file's
# and their imported file's. The imported files are part of what the shipped weights were trained with: a missing
# one (an install without the package data) fails loudly rather than tagging with a smaller gazetteer.
IMPORTED_DIR = LISTS_DIR / "imported"
IMPORTED_LISTS = ("first_names", "last_names", "cities", "countries")
HELD_OUT_ONE_IN = 5
LIST_NAMES = ("first_names", "last_names", "cities", "countries", "org_names", "org_suffixes", "streets", "demonyms")


@dataclass(frozen=True)
class WordList:
    train: tuple[str, ...]
    held_out: tuple[str, ...]


def _held_out(entry: str) -> bool:
    return xxhash.xxh32_intdigest(entry.encode()) % HELD_OUT_ONE_IN == 0


@cache
def word_list(name: str) -> WordList:
    files = [LISTS_DIR / f"{name}.txt"] + ([IMPORTED_DIR / f"{name}.txt"] if name in IMPORTED_LISTS else [])
    lines = [line for file in files for line in file.read_text(encoding="utf-8").splitlines()]
    entries = tuple(dict.fromkeys(line.strip() for line in lines if line.strip() and not line.startswith("#")))
    if name in ("org_suffixes", "demonyms"):  # closed classes: the model must know all of them
        return WordList(entries, entries)
    return WordList(tuple(e for e in entries if not _held_out(e)), tuple(e for e in entries if _held_out(e)))


@cache
def gazetteer() -> dict[str, frozenset[str]]:
    """List name -> lower-cased capitalized words of all its entries ("New York" -> new, york; not "der")."""
    out = {}
    for name in LIST_NAMES:
        words = {
            w.lower()
            for entry in word_list(name).train + word_list(name).held_out
            for w in entry.replace(",", " ").split()
            if w[:1].isupper() or not w[:1].isalpha()
        }
        out[name] = frozenset(words)
    return out
