"""The names part of `sluicegate bench guardrails` runs and measures what it says."""

import random

from bench import guardrails as bench
from bench.guardrails_names import NAME_TYPES, leaked, run_names


def test_names_bench_runs_on_a_minimal_size(capsys):
    report = run_names(True, 0, bench.pii_samples(random.Random(0), 20))
    for entity in NAME_TYPES:
        assert report["input"]["fast"][entity]["recall"] > 0.3
        assert report["input"]["stock"][entity]["recall"] == 0.0  # no spaCy model: stock Presidio finds no names
    assert report["stream"]["PERSON"]["support"] > 0 and "leaked" in report["stream"]["PERSON"]
    assert report["latency"]["fast_over_stock_p50"] > 0
    assert set(report["input_by_source"]) == {"uner_en_ewt", "wnut17", "templates"}
    assert all(set(table) <= set(NAME_TYPES) and table for table in report["input_by_source"].values())


def test_a_label_with_one_unmasked_character_counts_as_leaked():
    labels = [("PERSON", 10, 20), ("LOCATION", 30, 36)]
    assert leaked(labels, [("PERSON", 10, 19), ("LOCATION", 28, 40)]) == {"PERSON": 1}


def test_the_name_a_pii_template_writes_is_labelled_a_person():
    """The IBAN template names its account holder: finding that name is a hit for the names table, not a false
    positive, and the structured-PII table (no names in its policy) never sees the label."""
    samples = bench.pii_samples(random.Random(0), 400)
    people = [(text, start, end) for text, labels in samples for entity, start, end in labels if entity == "PERSON"]
    assert people and all(text[start:end] == bench.TEMPLATE_PERSON for text, start, end in people)
    assert all(f"account holder {bench.TEMPLATE_PERSON}" in text for text, _, _ in people)
