"""Benign prompts with their words shuffled, added to the encoder's training rows as benign.

Why: an encoder fine-tuned on attacks and fluent benign prompts learns "not fluent" as a sign of attack, because
adversarial text is often odd. Benign word salad then reads as an attack: keyword queries, tag lists, rotated or
mangled sentences (the held-out writers' benign prompts, their words shuffled: 26.2% flagged by the fit of
2026-12-07 06:10, 8.7% by the first fit with these rows; docs/benchmarks.md). Shuffled benign rows tell it that
disorder alone is no attack. Attacks are never shuffled: a shuffled attack may or may not still be one.
"""

from __future__ import annotations

import random

from guardrails.injection.dataset import Sample

SCRAMBLED_SOURCE = "synthetic_scrambled_benign"
SCRAMBLED_ROWS = 1500
MIN_WORDS = 6  # fewer words shuffle into something still fluent
MAX_WORDS = 80  # ~100-120 tokens, most of the encoder's 160-token window


def scrambled_benign(samples: list[Sample], seed: int, count: int = SCRAMBLED_ROWS) -> list[Sample]:
    """`count` benign rows of `samples` (chosen by a seeded draw, each at most once) with their words shuffled; a
    long prompt keeps its first MAX_WORDS words."""
    rng = random.Random(seed)
    candidates = []  # (benign row, its first MAX_WORDS words)
    for sample in samples:
        all_words = sample.text.split()
        words = all_words[:MAX_WORDS]
        if sample.label == 0 and len(all_words) >= MIN_WORDS and len(set(words)) > 1:
            candidates.append((sample, words))
    chosen = rng.sample(candidates, min(count, len(candidates)))
    rows = []
    for sample, words in chosen:
        shuffled = words[:]
        while shuffled == words:  # two different words at least: some order differs
            rng.shuffle(shuffled)
        rows.append(Sample(" ".join(shuffled), 0, SCRAMBLED_SOURCE, sample.lang))
    return rows
