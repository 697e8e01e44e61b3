"""PERSON / LOCATION / ORGANIZATION for Presidio from the shipped tagger, loaded once per process on first use."""

from __future__ import annotations

import threading

import guardrails.presidio_import  # noqa: F401  (before presidio/spacy: keeps torch out)

# isort: split

from presidio_analyzer import EntityRecognizer, RecognizerResult
from presidio_analyzer.nlp_engine import NlpArtifacts

from guardrails.ner.model import MODEL_PATH, NerModel
from guardrails.ner.products import inside_product_name
from guardrails.ner.tokens import ENTITY_TYPES

# The tagger gives no calibrated probability; one fixed score, above the default 0.4 threshold and below checksum-
# backed findings (1.0), so an IBAN or card inside a misread "name" keeps its own label.
NER_SCORE = 0.85

_model: NerModel | None = None
_model_lock = threading.Lock()


def shared_model() -> NerModel:
    """The process's tagger, loaded from the package on first call (~0.3 s); never downloads anything."""
    global _model
    if _model is None:
        with _model_lock:
            if _model is None:
                _model = NerModel.load(MODEL_PATH)
    return _model


class NerRecognizer(EntityRecognizer):
    NAME = "NerRecognizer"

    def __init__(self) -> None:
        super().__init__(supported_entities=list(ENTITY_TYPES), name=self.NAME, supported_language="en")

    def load(self) -> None:
        """Nothing at construction: the weights load lazily in `shared_model`, so a deployment that never asks for
        names pays nothing."""

    def analyze(
        self, text: str, entities: list[str], nlp_artifacts: NlpArtifacts | None = None
    ) -> list[RecognizerResult]:
        wanted = set(entities or ENTITY_TYPES) & set(ENTITY_TYPES)
        if not wanted:
            return []
        return [
            RecognizerResult(
                span.entity,
                span.start,
                span.end,
                NER_SCORE,
                recognition_metadata={
                    RecognizerResult.RECOGNIZER_NAME_KEY: self.NAME,
                    RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id,
                },
            )
            for span in shared_model().predict(text)
            if span.entity in wanted and not inside_product_name(text, span.start, span.end)
        ]
