"""Hashed token features for the tagger, cached per word so tagging a text costs a few dict look-ups per token.

A token's features are its own (lower-cased word, shape, affixes, capitalization, gazetteer hits), its
neighbours' (word and shape one and two tokens away), and two conjunctions (the word with the word before it, and with
the word after it). The first two depend only on a word, so each word's feature ids are hashed once and reused in every
position (`FeatureCache` bounds that cache); the conjunctions are hashed from those ids per text, with array ops.
Boundaries: a word two tokens away inside the text is context even when it is outside the tagged range.
"""

from __future__ import annotations

import threading

import numpy as np
import xxhash

from guardrails.ner.lists import LIST_NAMES, gazetteer

HASH_BITS = 20
_MASK = (1 << HASH_BITS) - 1
BOUNDARY = "<s>"
TITLES = frozenset("mr mrs ms miss dr prof sir madam herr frau dame lord mme mlle m sr sra srta don doña".split())
_OWN = 9 + len(LIST_NAMES) + 1
_ROW_WIDTH = _OWN + 3 + 3 + 1 + 1  # a word's row: own ids, then its ids as P1, N1, P2, N2
_PAIRS = 2  # per position, not per word: (previous word, word), (word, next word)
FEATURES_PER_TOKEN = _ROW_WIDTH + _PAIRS
_OWN_WORD = 1  # column of a word's own ids (see WordFeatures)
_NEXT_WORD = 0  # column of its P1 / N1 ids
_P1 = slice(_OWN, _OWN + 3)
_N1 = slice(_OWN + 3, _OWN + 6)
_P2 = slice(_OWN + 6, _OWN + 7)
_N2 = slice(_OWN + 7, _OWN + 8)
CACHE_MAX_WORDS = 200_000


def _h(feature: str) -> int:
    return xxhash.xxh32_intdigest(feature.encode()) & _MASK


def shape(word: str) -> str:
    """Character classes with runs collapsed: "McDonald" -> "XxXx", "B2B" -> "XdX", "2024-01" -> "d-d"."""
    out: list[str] = []
    for char in word:
        cls = "X" if char.isupper() else "x" if char.islower() else "d" if char.isdigit() else char
        if not out or out[-1] != cls:
            out.append(cls)
    return "".join(out[:6])


def _case(word: str) -> str:
    if word.isdigit():
        return "digit"
    if word.isupper():
        return "upper" if len(word) > 1 else "initial"
    if word.istitle():
        return "title"
    if word.islower():
        return "lower"
    return "mixed"


def _common_code(word: str, lower: str, common: frozenset[str]) -> str:
    """For a capitalized word: is its lower-case form a common lower-case word ("The", "Please", "Green")? Such a
    word is capitalized by position or emphasis far more often than it is a name; one that never appears in lower
    case ("Nuremberg", "Yamada") is usually a name."""
    if not word[:1].isupper():
        return "-"
    return "1" if lower in common else "0"


def _gazetteer_code(lower: str) -> str:
    return "".join("1" if lower in words else "0" for words in gazetteer().values())


def _pair(a: np.ndarray, b: np.ndarray, salt: int) -> np.ndarray:
    """One hashed id per row for the conjunction of two ids (vectorised: a text's pairs are a few array ops)."""
    mixed = (a.astype(np.int64) * 0x9E3779B1 + b.astype(np.int64) * 0x85EBCA77 + salt * 0xC2B2AE3D) >> 7
    return (mixed & _MASK).astype(np.int32)


class WordFeatures:
    """Feature ids of one word: as the token itself, and as each neighbour role."""

    __slots__ = ("own", "p1", "n1", "p2", "n2")

    def __init__(self, word: str, common: frozenset[str]) -> None:
        lower = word.lower()
        usual = "B" if word == BOUNDARY else _common_code(word, lower, common)
        shp = "B" if word == BOUNDARY else shape(word)
        gaz = "" if word == BOUNDARY else _gazetteer_code(lower)
        own = [
            "b",
            f"w:{lower}",
            f"sh:{shp}",
            f"p3:{lower[:3]}",
            f"s2:{lower[-2:]}",
            f"s3:{lower[-3:]}",
            f"s4:{lower[-4:]}",
            f"c:{_case(word)}|{usual}",
            f"t:{lower.rstrip('.') in TITLES}",
        ]
        own += [f"g{i}:{bit}" for i, bit in enumerate(gaz or "0" * len(LIST_NAMES))]
        own.append(f"gs:{shp}|{gaz}")
        self.own = [_h(f) for f in own]
        self.p1 = [_h(f"P1:{lower}"), _h(f"P1sh:{shp}|{usual}"), _h(f"P1g:{gaz}")]
        self.n1 = [_h(f"N1:{lower}"), _h(f"N1sh:{shp}|{usual}"), _h(f"N1g:{gaz}")]
        self.p2 = [_h(f"P2:{lower}")]
        self.n2 = [_h(f"N2:{lower}")]


class FeatureCache:
    """Word -> row of a table holding the word's feature ids in every role, so a text's feature matrix is one
    fancy-index of that table (no per-token Python lists).

    Thread-safe: the gateway scans from several threads, and a miss grows the table or, when full, restarts it; one
    lock around `ids` keeps a row number and the table it indexes consistent (the GIL serialises this work anyway).
    """

    def __init__(self, common_words: frozenset[str], max_words: int = CACHE_MAX_WORDS) -> None:
        self.common_words = common_words
        self.max_words = max_words
        self._rows: dict[str, int] = {}
        self._table = np.zeros((1024, _ROW_WIDTH), dtype=np.int32)
        self._lock = threading.Lock()
        self._boundary = self._row(BOUNDARY)

    def _row(self, word: str) -> int:
        row = self._rows.get(word)
        if row is None:
            row = len(self._rows)
            if row == len(self._table):
                self._table = np.concatenate([self._table, np.zeros_like(self._table)])
            self._table[row] = self._encode(word)
            self._rows[word] = row
        return row

    def _encode(self, word: str) -> list[int]:
        f = WordFeatures(word, self.common_words)
        return f.own + f.p1 + f.n1 + f.p2 + f.n2

    def ids(self, words: list[str], lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Feature ids for tokens lo..hi of `words`, shape (hi - lo, FEATURES_PER_TOKEN), using all of `words` as
        context."""
        hi = len(words) if hi is None else hi
        first, last = max(0, lo - 2), min(len(words), hi + 2)
        at = np.arange(lo - first + 2, hi - first + 2)  # positions of lo..hi in `index`
        with self._lock:
            if len(self._rows) + (last - first) > self.max_words:  # rare, cheap to refill: no LRU order needed
                self._rows.clear()
                self._boundary = self._row(BOUNDARY)
            edge = self._boundary
            index = np.array([edge, edge] + [self._row(w) for w in words[first:last]] + [edge, edge], dtype=np.intp)
            table = self._table
            own = table[index[at], :_OWN]
            p1 = table[index[at - 1], _P1]
            n1 = table[index[at + 1], _N1]
            # Conjunctions a linear model cannot form from the single ids: "Bank of" is an organization's start where
            # "Bank" and "of" alone say little. On the held-out corpora (two seeds) they raised web text's PERSON
            # and ORGANIZATION precision 1-4 points at equal recall. A third, the three shapes, did as well there but
            # tagged "in room 4B" as a place (shape "x dX", an address unit's in the synthetic training sentences).
            word = own[:, _OWN_WORD]
            pairs = np.stack(
                [
                    _pair(p1[:, _NEXT_WORD], word, 1),
                    _pair(word, n1[:, _NEXT_WORD], 2),
                ],
                axis=1,
            )
            return np.concatenate(
                [own, p1, n1, table[index[at - 2], _P2], table[index[at + 2], _N2], pairs],
                axis=1,
            )
