"""Hashed n-gram features of a prompt, the same at training and at inference (numpy only, no Python-level loop over
characters): character 2-5-grams and word uni/bigrams of the normalized text, hashed into 2^18 buckets.

Why hashing: no vocabulary to ship or keep in sync, and unseen words in unseen languages still land somewhere the
model has weights for (their character n-grams). Why characters: they survive typos, inflection ("ignorieren",
"ignoriere"), leetspeak left over after folding and languages with no spaces.

The hand-written rules are not features: on a 100-token prompt that mentions instructions they cost several times
the n-grams (tens of regexes), and they did not move held-out recall in a trial.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

import numpy as np

from guardrails.injection.normalize import normalize

NUM_BUCKETS_LOG2 = 18
NUM_BUCKETS = 1 << NUM_BUCKETS_LOG2
CHAR_NGRAM_SIZES = (2, 3, 4, 5)
HEAD_CHARS = 3000
TAIL_CHARS = 1000
"""A longer prompt is read as its first HEAD_CHARS and last TAIL_CHARS: a jailbreak template states its frame at
the start and its request at the end, and the cost per prompt stays bounded (a 12k-char paste scores like a 4k one).
"""

_PRIME = np.uint64(0x100000001B3)  # FNV-1a's 64-bit prime: the rolling step of the n-gram hash
_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: the top bits of h * _MIX are well spread
_SHIFT = np.uint64(64 - NUM_BUCKETS_LOG2)
_SEED_CHAR = tuple(np.uint64(0x51ED0000 + n) for n in range(8))
_SEED_WORD = np.uint64(0xA11CE)
_SEED_BIGRAM = np.uint64(0xB16A4)
LENGTH_EXPONENT = 0.5
"""Each n-gram of a family counts n-grams**-LENGTH_EXPONENT: 0.5 gives a text of distinct n-grams unit norm (1.0,
an average, scored short attacks no better in a trial and made long benign posts look like attacks)."""
_WORD = re.compile(r"\w+")
# Leetspeak inside a word ("1gn0re", "pr3v10us", "@dmin"): only digits or @/$ that touch a letter are folded, so
# numbers ("1990", "3.5") keep their digits.
_LEET_RUN = re.compile(r"(?<=[a-z])[013457@$]+|[013457@$]+(?=[a-z])")
_LEET = str.maketrans("013457@$", "oieastas")


@dataclass(frozen=True, slots=True)
class Features:
    """A sparse row as a bag: bucket ids (repeats allowed; a repeat adds up) and one value per family of n-grams.

    Each n-gram of a family counts 1/sqrt(n-grams in the family): a text of distinct n-grams has unit norm, so
    length alone does not move the score. Keeping repeats instead of counting unique buckets saves a sort (np.unique)
    per family, most of the cost at inference.
    """

    char_buckets: np.ndarray  # uint64 [num char n-grams]
    word_buckets: np.ndarray  # uint64 [num words + num word bigrams]

    @property
    def char_value(self) -> float:
        return self.char_buckets.size**-LENGTH_EXPONENT if self.char_buckets.size else 0.0

    @property
    def word_value(self) -> float:
        return self.word_buckets.size**-LENGTH_EXPONENT if self.word_buckets.size else 0.0


def prepare(folded_text: str) -> str:
    """The text the n-grams are taken from: the normalized text (invisible characters, homoglyphs, full-width,
    s-p-a-c-e-d letters undone) lower-cased and leetspeak folded (`fold_leetspeak`), whitespace collapsed, head and
    tail of a long prompt."""
    collapsed = " ".join(folded_text.split())
    if len(collapsed) > HEAD_CHARS + TAIL_CHARS:
        collapsed = collapsed[:HEAD_CHARS] + " " + collapsed[-TAIL_CHARS:]
    return collapsed


def fold_leetspeak(text: str) -> tuple[str, int]:
    """`text` (lower case) with the leetspeak inside its words folded to letters, and how many runs were folded."""
    return _LEET_RUN.subn(lambda m: m[0].translate(_LEET), text)


def featurize(text: str) -> Features:
    return featurize_normalized(normalize(text).text)


def featurize_normalized(normalized_text: str) -> Features:
    return featurize_folded(fold_leetspeak(normalized_text.lower())[0])


def featurize_folded(folded_text: str) -> Features:
    """Features of a normalized text already lower-cased and leetspeak folded (the detector folds it once for its
    rules and the model alike)."""
    prepared = prepare(folded_text)
    return Features(_char_ngram_buckets(prepared), _word_buckets(prepared))


def _char_ngram_buckets(prepared: str) -> np.ndarray:
    codes = np.frombuffer((" " + prepared + " ").encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    out = []
    rolling = codes.copy()
    for n in range(2, max(CHAR_NGRAM_SIZES) + 1):
        if len(codes) < n:
            break
        rolling = rolling[:-1] * _PRIME + codes[n - 1 :]  # uint64 arithmetic wraps, which a hash wants
        if n in CHAR_NGRAM_SIZES:
            out.append(((rolling ^ _SEED_CHAR[n]) * _MIX) >> _SHIFT)
    return np.concatenate(out) if out else np.zeros(0, np.uint64)


def _word_buckets(prepared: str) -> np.ndarray:
    words = _WORD.findall(prepared)
    if not words:
        return np.zeros(0, np.uint64)
    # crc32 is deterministic across processes (str.__hash__ is salted per process) and runs in C
    hashes = np.fromiter((zlib.crc32(word.encode()) for word in words), dtype=np.uint64, count=len(words))
    unigrams = ((hashes ^ _SEED_WORD) * _MIX) >> _SHIFT
    bigrams = (((hashes[:-1] * _PRIME + hashes[1:]) ^ _SEED_BIGRAM) * _MIX) >> _SHIFT
    return np.concatenate([unigrams, bigrams])
