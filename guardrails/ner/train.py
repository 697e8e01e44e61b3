"""Train the tagger: `python -m guardrails.ner.train --out guardrails/ner/model [--subset N] [--held-out a,b]`.

An averaged structured perceptron (Collins 2002): tag a sentence with Viterbi under the current weights; where the
path differs from the gold one, add 1 to the gold tags' features and transitions and subtract 1 from the predicted
ones. The averaged weights (the mean over every step) generalise far better than the last ones. Deterministic for a
seed: the shuffles use `random.Random(seed)` and nothing else is random.

Writes to --out: ner.npz (the weights), scores.json (per-type precision/recall on the held-out sources and the
template test set, and the exact counts on sample.jsonl), sample.jsonl (a fixed sample of held-out sentences that
the tests re-score to check the shipped weights).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from guardrails.ner import synthetic
from guardrails.ner.corpus import HELD_OUT_SOURCES, SOURCES, load_source
from guardrails.ner.evaluate import score
from guardrails.ner.features import FEATURES_PER_TOKEN, HASH_BITS, FeatureCache
from guardrails.ner.model import NerModel, masked, viterbi
from guardrails.ner.synthetic import Sentence
from guardrails.ner.tokens import TAGS, Span, spans_to_tags, tokenize

SYNTHETIC_TRAIN = 16_000
SYNTHETIC_TEST = 1_500
SAMPLE_SIZE = 300
COMMON_MIN_COUNT = 3


class _Averaged:
    """Perceptron weights with lazy averaging: avg = w - u / steps, where u accumulates step * update."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.w = np.zeros(shape, dtype=np.float32)
        self.u = np.zeros(shape, dtype=np.float32)

    def add(self, index, amount: np.ndarray | float, step: int) -> None:
        np.add.at(self.w, index, amount)
        np.add.at(self.u, index, np.multiply(amount, step, dtype=np.float32))

    def averaged(self, steps: int) -> np.ndarray:
        return self.w - self.u / steps


def _encode(sentences: list[Sentence], cache: FeatureCache) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for sentence in sentences:
        tokens = tokenize(sentence.text)
        if not tokens:
            continue
        tags = spans_to_tags(tokens, [Span(*s) for s in sentence.spans])
        out.append((cache.ids([t.text for t in tokens]), np.array(tags, dtype=np.intp)))
    return out


def common_lower_words(sentences: list[Sentence]) -> frozenset[str]:
    counts = Counter(t.text for s in sentences for t in tokenize(s.text) if t.text.islower())
    return frozenset(word for word, count in counts.items() if count >= COMMON_MIN_COUNT)


def usable(sentence: Sentence) -> Sentence:
    """Without "@handle" / "#tag" spans: Broad Twitter Corpus labels user names as PERSON, WNUT does not, and a
    handle is an account name, not a person's name in text."""
    spans = [s for s in sentence.spans if sentence.text[s[0]] not in "@#"]
    return sentence if len(spans) == len(sentence.spans) else Sentence(sentence.text, spans, sentence.source)


def train(sentences: list[Sentence], epochs: int, seed: int) -> NerModel:
    common = common_lower_words(sentences)
    cache = FeatureCache(common, max_words=10**9)  # training keeps every word: the corpus is small
    encoded = _encode(sentences, cache)
    tags = len(TAGS)
    emit = _Averaged((1 << HASH_BITS, tags))
    trans = _Averaged((tags, tags))
    start = _Averaged((tags,))
    rng = random.Random(seed)
    step = 1
    for epoch in range(epochs):
        order = list(range(len(encoded)))
        rng.shuffle(order)
        errors = 0
        for k in order:
            ids, gold = encoded[k]
            transitions, start_scores = masked(trans.w, start.w)
            pred = np.array(viterbi(emit.w[ids].sum(axis=1), transitions, start_scores), dtype=np.intp)
            wrong = pred != gold
            if wrong.any():
                errors += 1
                rows = ids[wrong]
                emit.add((rows.ravel(), np.repeat(gold[wrong], FEATURES_PER_TOKEN)), 1.0, step)
                emit.add((rows.ravel(), np.repeat(pred[wrong], FEATURES_PER_TOKEN)), -1.0, step)
                if gold[0] != pred[0]:
                    start.add(gold[0], 1.0, step)
                    start.add(pred[0], -1.0, step)
                pairs = (gold[:-1] != pred[:-1]) | (gold[1:] != pred[1:])
                trans.add((gold[:-1][pairs], gold[1:][pairs]), 1.0, step)
                trans.add((pred[:-1][pairs], pred[1:][pairs]), -1.0, step)
            step += 1
        print(f"epoch {epoch + 1}/{epochs}: {errors / len(encoded):.3f} of sentences wrong", file=sys.stderr)
    return NerModel(emit.averaged(step), trans.averaged(step), start.averaged(step), common)


def _subset(sentences: list[Sentence], limit: int | None, rng: random.Random) -> list[Sentence]:
    if limit is None or limit >= len(sentences):
        return sentences
    return rng.sample(sentences, limit)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m guardrails.ner.train", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for ner.npz, scores.json, sample.jsonl")
    parser.add_argument("--subset", type=int, default=None, help="at most N sentences per source (quick runs)")
    parser.add_argument(
        "--held-out", default=",".join(HELD_OUT_SOURCES), help="comma-separated sources kept out of training and scored"
    )
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    held_out = [s for s in args.held_out.split(",") if s]
    rng = random.Random(args.seed)
    started_s = time.perf_counter()
    train_set: list[Sentence] = []
    for source in SOURCES:
        if source not in held_out:
            train_set += [usable(s) for s in _subset(load_source(source), args.subset, rng)]
    train_set += _subset(synthetic.sentences("train", SYNTHETIC_TRAIN, args.seed), args.subset, rng)
    model = train(train_set, args.epochs, args.seed)
    train_s = time.perf_counter() - started_s

    tests = {source: [usable(s) for s in _subset(load_source(source), args.subset, rng)] for source in held_out}
    tests["synthetic-test"] = _subset(synthetic.sentences("test", SYNTHETIC_TEST, args.seed), args.subset, rng)
    report = {
        "seed": args.seed,
        "epochs": args.epochs,
        "subset": args.subset,
        "held_out": held_out,
        "train_sentences": len(train_set),
        "train_seconds": round(train_s, 1),
        "scores": {},
    }
    for name, sentences in tests.items():
        report["scores"][name] = score(model.predict, sentences).as_dict()
    sample = [s for sentences in tests.values() for s in sentences]
    sample = random.Random(args.seed).sample(sample, min(SAMPLE_SIZE, len(sample)))
    report["sample_scores"] = score(model.predict, sample).as_dict()

    args.out.mkdir(parents=True, exist_ok=True)
    model.save(args.out / "ner.npz")
    with open(args.out / "sample.jsonl", "w", encoding="utf-8") as out:
        for s in sample:
            out.write(json.dumps({"text": s.text, "spans": s.spans, "source": s.source}, ensure_ascii=False) + "\n")
    (args.out / "scores.json").write_text(json.dumps(report, indent=1) + "\n")
    for name, table in report["scores"].items():
        cells = "  ".join(
            f"{t} P {row['precision']:.3f} R {row['recall']:.3f} (n={row['support']})" for t, row in table.items()
        )
        print(f"{name:<16} {cells}")
    print(f"trained on {len(train_set)} sentences in {train_s:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
