"""The word lists in lists/: names, places, organizations, street words.

Each list is split once, by a stable hash of the entry, into a train part (the gazetteer the model sees as a feature,
and the names its template sentences use) and a held-out part (used only in the template test sentences), so the
synthetic test measures names the model has never seen, in or out of the gazetteer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import xxhash

LISTS_DIR = Path(__file__).parent / "lists"
HELD_OUT_ONE_IN = 5
LIST_NAMES = ("first_names", "last_names", "cities", "countries", "org_names", "org_suffixes", "streets")


@dataclass(frozen=True)
class WordList:
    train: tuple[str, ...]
    held_out: tuple[str, ...]


def _held_out(entry: str) -> bool:
    return xxhash.xxh32_intdigest(entry.encode()) % HELD_OUT_ONE_IN == 0


@cache
def word_list(name: str) -> WordList:
    lines = (LISTS_DIR / f"{name}.txt").read_text(encoding="utf-8").splitlines()
    entries = tuple(dict.fromkeys(line.strip() for line in lines if line.strip() and not line.startswith("#")))
    if name == "org_suffixes":  # legal forms are a closed class: the model must know all of them
        return WordList(entries, entries)
    return WordList(tuple(e for e in entries if not _held_out(e)), tuple(e for e in entries if _held_out(e)))


@cache
def gazetteer() -> dict[str, frozenset[str]]:
    """List name -> lower-cased capitalized words of its train entries ("New York" -> new, york; not "der")."""
    out = {}
    for name in LIST_NAMES:
        words = {
            w.lower()
            for entry in word_list(name).train
            for w in entry.replace(",", " ").split()
            if w[:1].isupper() or not w[:1].isalpha()
        }
        out[name] = frozenset(words)
    return out
