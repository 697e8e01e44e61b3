"""Per-type precision and recall of predicted spans against labelled sentences (exact span and type)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from guardrails.ner.synthetic import Sentence
from guardrails.ner.tokens import ENTITY_TYPES, Span


@dataclass
class TypeCounts:
    true_positives: int = 0
    false_positives: int = 0
    false_negatives: int = 0

    @property
    def precision(self) -> float:
        found = self.true_positives + self.false_positives
        return self.true_positives / found if found else 1.0

    @property
    def recall(self) -> float:
        labelled = self.true_positives + self.false_negatives
        return self.true_positives / labelled if labelled else 1.0


@dataclass
class Scores:
    by_type: dict[str, TypeCounts] = field(default_factory=lambda: {t: TypeCounts() for t in ENTITY_TYPES})

    def add(self, gold: Iterable[tuple[int, int, str]], predicted: Iterable[Span]) -> None:
        gold_set = set(gold)
        found = {(s.start, s.end, s.entity) for s in predicted}
        for start, end, entity in found | gold_set:
            counts = self.by_type[entity]
            if (start, end, entity) in gold_set and (start, end, entity) in found:
                counts.true_positives += 1
            elif (start, end, entity) in found:
                counts.false_positives += 1
            else:
                counts.false_negatives += 1

    def as_dict(self) -> dict[str, dict[str, float]]:
        return {
            t: {
                "precision": round(c.precision, 4),
                "recall": round(c.recall, 4),
                "support": c.true_positives + c.false_negatives,
                "tp": c.true_positives,
                "fp": c.false_positives,
                "fn": c.false_negatives,
            }
            for t, c in self.by_type.items()
        }


def score(predict: Callable[[str], list[Span]], sentences: Iterable[Sentence]) -> Scores:
    scores = Scores()
    for sentence in sentences:
        scores.add(sentence.spans, predict(sentence.text))
    return scores
