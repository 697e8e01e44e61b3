"""The red-team sets nothing trains on (guardrails/injection/data/redteam/, dataset.load_redteam): they load as six
writers' sources, and the gateway's detector holds a floor on the five held out for everything: a regression
floor at today's level, far under the goal (docs/benchmarks.md has the figures)."""

from bench.guardrails import redteam_scores
from guardrails.injection.dataset import load_all, load_redteam
from guardrails.injection.detector import InjectionDetector
from guardrails.injection.model import shipped_model


def test_the_redteam_sets_load_as_six_sources_in_three_languages():
    rows = load_redteam()
    assert {row.source for row in rows} == {f"redteam_{team}" for team in "abcdef"}
    for source in {row.source for row in rows}:
        members = [row for row in rows if row.source == source]
        assert {row.label for row in members} == {0, 1}
        assert {row.lang for row in members} == {"en", "de", "es"}


def test_nothing_trains_on_them():
    training = {sample.text for sample in load_all()}
    assert not training & {row.text for row in load_redteam()}


def test_the_detector_holds_its_floor_on_the_held_out_writers():
    table = redteam_scores(InjectionDetector(model=shipped_model()), quick=False)
    held_out = table["held out (a-d, f)"]
    assert held_out["attacks"] == 1019 and held_out["benign"] == 1317
    assert held_out["recall"] >= 0.25 and held_out["fpr"] <= 0.03
