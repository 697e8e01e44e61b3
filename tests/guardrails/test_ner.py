"""The shipped name tagger: it loads, tags, reproduces its recorded scores, and its trainer runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from guardrails import GuardrailPolicy
from guardrails.ner.corpus import HELD_OUT_SOURCES
from guardrails.ner.evaluate import score
from guardrails.ner.lists import IMPORTED_DIR, IMPORTED_LISTS, LISTS_DIR, gazetteer, word_list
from guardrails.ner.model import MODEL_PATH, NerModel, segments
from guardrails.ner.recognizer import shared_model
from guardrails.ner.synthetic import Sentence
from guardrails.ner.tokens import Span, spans_to_tags, tags_to_spans, tokenize

MODEL_DIR = MODEL_PATH.parent
NAMES = GuardrailPolicy(pii_entities=("PERSON", "LOCATION", "ORGANIZATION"), pii_action="redact")


def test_shipped_model_is_small_and_tags_names():
    assert MODEL_PATH.stat().st_size < 20 * 2**20
    spans = shared_model().predict("Please forward the contract to Maria Gonzalez at Siemens in Munich.")
    found = {(s.entity, s.start, s.end) for s in spans}
    assert ("PERSON", 31, 45) in found


def test_shipped_weights_reproduce_their_recorded_scores():
    """scores.json holds the exact counts the shipped weights got on sample.jsonl when they were trained."""
    recorded = json.loads((MODEL_DIR / "scores.json").read_text())["sample_scores"]
    rows = [json.loads(line) for line in (MODEL_DIR / "sample.jsonl").read_text(encoding="utf-8").splitlines()]
    sample = [Sentence(r["text"], [tuple(s) for s in r["spans"]], r["source"]) for r in rows]
    measured = score(NerModel.load().predict, sample).as_dict()
    assert measured == recorded


def test_the_gazetteer_holds_the_imported_census_and_geonames_entries():
    """Names and places found only in lists/imported/ (not in the hand-written lists) are in the gazetteer whole,
    held-out template entries included; the imported files are what import_lists.py writes, Latin script only."""
    hand_written = {
        name: set((LISTS_DIR / f"{name}.txt").read_text(encoding="utf-8").splitlines())
        for name in ("first_names", "last_names", "cities")
    }
    for name, entry in (("first_names", "Thorsten"), ("last_names", "Wojcik"), ("cities", "Tegucigalpa")):
        imported = (IMPORTED_DIR / f"{name}.txt").read_text(encoding="utf-8").splitlines()
        assert entry not in hand_written[name] and entry in imported
        assert entry.lower() in gazetteer()[name]
    held_out_words = {w.lower() for e in word_list("last_names").held_out for w in e.split() if w[:1].isupper()}
    assert held_out_words and held_out_words <= gazetteer()["last_names"]
    for name in IMPORTED_LISTS:
        entries = (IMPORTED_DIR / f"{name}.txt").read_text(encoding="utf-8").splitlines()[1:]
        assert len(entries) > 250 and all(e[:1].isupper() for e in entries)
        assert entries == sorted(set(entries))


@pytest.mark.parametrize(
    ("text", "places"),
    [
        ("Many Germans and Italians moved to Argentina after the war.", ["Argentina"]),
        ("Our French team in Lyon ships the Japanese orders.", ["Lyon"]),
    ],
)
def test_nationalities_are_not_places(text, places):
    """Demonyms (lists/demonyms.txt) sit beside places but are none: the corpora label them O."""
    spans = shared_model().predict(text)
    assert [text[s.start : s.end] for s in spans if s.entity == "LOCATION"] == places


def test_a_span_ends_at_a_line_break():
    text = "Acme Robotics GmbH\nMunich"
    tokens = tokenize(text)
    one_span = spans_to_tags(tokens, [Span(0, len(text), "ORGANIZATION")])
    assert tags_to_spans(tokens, one_span) == [Span(0, len(text), "ORGANIZATION")]
    assert tags_to_spans(tokens, one_span, text) == [Span(0, 18, "ORGANIZATION"), Span(19, 25, "ORGANIZATION")]


def test_bio_round_trip_keeps_spans():
    text = "Dr. Jean-Pierre O'Brien of Bank of America visited São Paulo, Brazil."
    spans = [Span(4, 23, "PERSON"), Span(27, 42, "ORGANIZATION"), Span(51, 60, "LOCATION"), Span(62, 68, "LOCATION")]
    tokens = tokenize(text)
    assert tags_to_spans(tokens, spans_to_tags(tokens, spans)) == spans


def test_only_capitalized_stretches_are_tagged():
    tokens = tokenize("please ask maria about it, then Tell Bank of America and stop")
    assert [(tokens[lo].text, tokens[hi - 1].text) for lo, hi in segments(tokens)] == [("then", "and")]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Send it to 221B Baker Street, London NW1 6XE by Monday.", "221B Baker Street, London NW1 6XE"),
        ("Lieferadresse: Hauptstraße 5, 10115 Berlin.", "Hauptstraße 5, 10115 Berlin"),
        ("Livraison au 12 rue de la Paix, 75002 Paris.", "12 rue de la Paix, 75002 Paris"),
        ("Envíelo a Calle de Alcalá 42, 28014 Madrid.", "Calle de Alcalá 42, 28014 Madrid"),
        (
            "Ship to 1600 Pennsylvania Ave NW, Washington, DC 20500 please",
            "1600 Pennsylvania Ave NW, Washington, DC 20500",
        ),
    ],
)
def test_street_addresses_are_locations(guardrails_engine, text, expected):
    findings = guardrails_engine.scanner.scan(text, NAMES)
    assert ("LOCATION", expected) in [(f.entity, text[f.start : f.end]) for f in findings]


def test_names_are_redacted_on_input(guardrails_engine):
    verdict = guardrails_engine.check_input(["Email Priya Sharma about the Lisbon offsite, thanks"], NAMES)
    assert verdict.texts == ("Email <PERSON> about the <LOCATION> offsite, thanks",)


def test_lower_case_and_plain_text_has_no_names(guardrails_engine):
    for text in [
        "please summarise the quarterly report in five bullet points",
        "The report is due on Monday. Thanks!",
        "Use Python 3.12 and run the tests with pytest.",
    ]:
        assert guardrails_engine.scanner.scan(text, NAMES) == [], text


def test_training_runs_on_a_tiny_subset(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "guardrails.ner.train", "--out", str(tmp_path), "--subset", "40", "--epochs", "1"],
        check=True,
        capture_output=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    report = json.loads((tmp_path / "scores.json").read_text())
    assert report["subset"] == 40 and set(report["scores"]) == {*HELD_OUT_SOURCES, "synthetic-test"}
    NerModel.load(tmp_path / "ner.npz").predict("Hello Maria")


def test_a_full_word_cache_restarts_without_changing_results():
    from guardrails.ner.features import FeatureCache

    model = shared_model()
    texts = ["Ask Maria Gonzalez at Siemens in Munich.", "Priya Sharma moved from Lisbon to Deutsche Bank in Berlin."]
    expected = [model.predict(t) for t in texts]
    small = NerModel(model.weights, model.transitions, model.start, model.common_words)
    small.cache = FeatureCache(model.common_words, max_words=12)
    assert [small.predict(t) for t in texts * 3] == expected * 3


def test_concurrent_tagging_matches_serial():
    from concurrent.futures import ThreadPoolExecutor

    model = NerModel.load()
    texts = [
        f"Please ask {first} {last} from {city} about the {org} invoice number {i}."
        for i, (first, last, city, org) in enumerate(
            [
                ("Maria", "Gonzalez", "Madrid", "Siemens"),
                ("Kwame", "Mensah", "Accra", "Vodafone"),
                ("Li", "Wang", "Shanghai", "Huawei"),
                ("Sven", "Larsen", "Oslo", "Equinor"),
            ]
            * 25
        )
    ]
    reference = NerModel.load()
    serial = [reference.predict(t) for t in texts]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(model.predict, texts)) == serial


def test_a_placeholder_is_not_a_name_again(guardrails_engine):
    """ "<ORGANIZATION>" reads as an all-caps acronym: redacting it again nested the brackets on every round trip."""
    verdict = guardrails_engine.check_input(["Ask <ORGANIZATION> again, and Acme Corporation too."], NAMES)
    assert verdict.texts == ("Ask <ORGANIZATION> again, and <ORGANIZATION> too.",)
    # a name a user wrote in brackets is still a name
    verdict = guardrails_engine.check_input(["My name is <JOHN SMITH>, thanks."], NAMES)
    assert verdict.texts == ("My name is <<PERSON>>, thanks.",)
