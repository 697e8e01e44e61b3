"""The labelled prompts the detector is trained and validated on: the copied public sets in data/ (see data/README.md)
plus the template-generated ones in synthetic.py, each row tagged with the source it came from.

Validation holds out whole sources, never random rows: the detector is judged on sets it never saw, and rows of one
source share a style (a template, a translator, a forum) that a random split would leak.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import regex

DATA_DIR = Path(__file__).resolve().parent / "data"
# BIPIA's bare "task-irrelevant" attack instructions ("What is the capital of Brazil?", "Explain the theory of
# relativity.") are attacks only when smuggled into a document; on their own they are ordinary requests, and as
# positives they would teach the model that any question is an attack.
EXCLUDED_SUBSETS = frozenset(
    {"Information Retrieval", "Content Creation", "Learning and Tutoring", "Language Translation", "Programming Help"}
)
# deepset's set labels three shared persona prompts (awesome-chatgpt-prompts, CC0: the debater, the Linux terminal,
# the English translator; in English and German, some after an unrelated question) as injections. The gateway
# treats a persona request as a request (users paste these prompts by the hundred), so as positives they would teach
# the model to block them; they are left out of training and validation (11 rows).
SHARED_PERSONA_ATTACKS = regex.compile(
    r"\bI want you to act as (?:a debater|a linux terminal|an English translator)\b"
    r"|\bIch möchte, dass Sie als (?:Debattierer|Linux-Terminal|Englisch-Übersetzer)\b",
    regex.IGNORECASE,
)
# The three BIPIA files share text: the injected contexts are the clean contexts with one of the bare attacks
# inserted. Held out one at a time, each would be "seen" through the others (or, holding out the clean contexts
# alone, every email or table would look like an attack), so they are one source.
SOURCE_GROUPS = {
    name: "mixed_bipia"
    for name in ("attack_bipia_train", "attack_bipia_injected_contexts", "benign_bipia_clean_contexts")
}


@dataclass(frozen=True, slots=True)
class Sample:
    text: str
    label: int  # 1 = injection / jailbreak, 0 = benign
    source: str  # the file (group) it came from: the unit held out in validation
    lang: str  # ISO-639-1


def load_copied(data_dir: Path = DATA_DIR) -> list[Sample]:
    samples = []
    for path in sorted(data_dir.glob("*.jsonl.gz")):
        name = path.name.removesuffix(".jsonl.gz")
        group = SOURCE_GROUPS.get(name, name)
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                row = json.loads(line)
                if row["label"] == 1 and (
                    row["source"].rpartition("#")[2] in EXCLUDED_SUBSETS or SHARED_PERSONA_ATTACKS.search(row["text"])
                ):
                    continue
                samples.append(Sample(row["text"], int(row["label"]), group, row["lang"]))
    return samples


REDTEAM_DIR = DATA_DIR / "redteam"
# The red-team writers (data/README.md). The encoder's training script (encoder/train.py) reads ENCODER_TRAIN_TEAMS:
# it fits on all but its validation writers (e, f, ak, al, aq, az), whose benign prompts pick its threshold. A
# pretrained transformer learns from other writers what n-grams do not (the n-gram model trains on none of them). g-i
# were written for evaluation alone; ac and af, am and an, then ar, each written in the same session as writers that
# train, are held out too; as and at were written for evaluation after the fit they first scored, and ba and bb beside
# the writers au-az and read only after the fit that trains on those, so the estimate rests on twelve writers (each
# batch of new writers, scored before any training on them, has landed near the estimate of the held-out writers
# before it, or below: docs/benchmarks.md). Of bc-br, which all train, bc-bf and bk-bp were briefed for German and
# Spanish, where the held-out writers showed the detector weakest; bq and br are translators, who put 300 English rows
# of training writers into German and into Spanish (the same rows: parallel text for an encoder pretrained on English).
ENCODER_TRAIN_TEAMS = (
    *"abcdefjklmnopqrstuvwxyz",
    *"aa ab ad ae ag ah ai aj ak al ao ap aq au av aw ax ay az bc bd be bf bg bh bi bj bk bl bm bn bo bp bq br".split(),
)
HELD_OUT_TEAMS = ("g", "h", "i", "ac", "af", "am", "an", "ar", "as", "at", "ba", "bb")


def load_redteam(data_dir: Path = REDTEAM_DIR, teams: tuple[str, ...] | None = None) -> list[Sample]:
    """The red-team sets written for the project (data/README.md), by team; source "redteam_X" holds team X's
    attacks and benign prompts. `teams` None: every team."""
    samples = []
    for path in sorted(data_dir.glob("*_redteam_*.jsonl.gz")):
        team = path.name.removesuffix(".jsonl.gz").rpartition("_")[2]
        if teams is not None and team not in teams:
            continue
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            samples += [
                Sample(row["text"], int(row["label"]), f"redteam_{team}", row["lang"]) for row in map(json.loads, lines)
            ]
    return samples


def load_all(seed: int = 0) -> list[Sample]:
    from guardrails.injection.synthetic import generate

    return load_copied() + generate(seed)


def subset(samples: list[Sample], max_per_source: int, seed: int) -> list[Sample]:
    """At most `max_per_source` rows of each source (for a quick training run), chosen by a seeded shuffle."""
    rng = np.random.default_rng(seed)
    kept: list[Sample] = []
    for source in sorted({s.source for s in samples}):
        rows = [s for s in samples if s.source == source]
        kept += [rows[i] for i in sorted(rng.permutation(len(rows))[:max_per_source])]
    return kept


def sample_weights(samples: list[Sample]) -> np.ndarray:
    """Per-row weights: each source weighs sqrt(its size) in all, then attacks and benign weigh the same in total.

    Why: the biggest sources (3,550 xquad questions, 1,222 PurpleLlama attacks) would otherwise set the decision
    boundary alone, and a model that learns "a Wikipedia question is benign" learns style, not intent.
    """
    sizes = Counter(s.source for s in samples)
    weights = np.array([np.sqrt(sizes[s.source]) / sizes[s.source] for s in samples])
    labels = np.array([s.label for s in samples])
    for label in (0, 1):
        mask = labels == label
        if mask.any():
            weights[mask] *= 0.5 * len(samples) / weights[mask].sum()
    return weights
