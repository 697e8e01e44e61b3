"""Presidio's spaCy NLP engine with the pipeline injected, so nothing is ever downloaded.

Without a model path the pipeline is `spacy.blank("en")` (tokenizer only) plus a component that sets each token's
lemma to its lower-case form: Presidio's context enhancer compares lemmas with context words ("phone", "ssn"), and a
blank pipeline's lemmas are empty, which would silently disable context scoring.
"""

from __future__ import annotations

from pathlib import Path

import guardrails.presidio_import  # noqa: F401  (before presidio/spacy: keeps torch out)

# isort: split

import spacy
from presidio_analyzer.nlp_engine import SpacyNlpEngine
from spacy.language import Language
from spacy.tokens import Doc

from guardrails.errors import GuardrailConfigError

LOWER_LEMMA = "sluicegate_lower_lemma"


@Language.component(LOWER_LEMMA)
def _lower_lemma(doc: Doc) -> Doc:
    for token in doc:
        token.lemma_ = token.lower_
    return doc


class InjectedSpacyNlpEngine(SpacyNlpEngine):
    """SpacyNlpEngine whose `load()` uses a pipeline we built instead of `spacy.load` by package name (which
    downloads a missing model)."""

    def __init__(self, pipeline: Language) -> None:
        super().__init__(models=[{"lang_code": "en", "model_name": pipeline.meta.get("name", "blank")}])
        self._pipeline = pipeline

    def load(self) -> None:
        self.nlp = {"en": self._pipeline}  # type: ignore[assignment]  # presidio infers `nlp` from its `= None`


def make_nlp_engine(spacy_model_path: str | None) -> InjectedSpacyNlpEngine:
    """The blank English pipeline, or the spaCy pipeline saved at `spacy_model_path` (must have an `ner` pipe)."""
    if spacy_model_path is None:
        pipeline = spacy.blank("en")
    else:
        pipeline = _load_model(Path(spacy_model_path))
    if "lemmatizer" not in pipeline.pipe_names:
        pipeline.add_pipe(LOWER_LEMMA)
    engine = InjectedSpacyNlpEngine(pipeline)
    engine.load()
    return engine


def _load_model(path: Path) -> Language:
    if not (path / "config.cfg").is_file():
        raise GuardrailConfigError(
            f"spacy_model_path={str(path)!r} is not a spaCy pipeline folder (no config.cfg there); unpack a model "
            "such as en_core_web_sm to a folder and point spacy_model_path at it, or set it to null"
        )
    pipeline = spacy.load(path)
    if not pipeline.has_pipe("ner") and not pipeline.has_pipe("entity_ruler"):
        raise GuardrailConfigError(
            f"spacy_model_path={str(path)!r} has no 'ner' or 'entity_ruler' pipe (pipes: {pipeline.pipe_names}); "
            "PERSON/LOCATION need a pipeline that labels entities"
        )
    return pipeline
