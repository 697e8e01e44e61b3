"""OverlapGate: which admissions may overlap the upstream request (logic only; test_overlap.py runs it for real)."""

from __future__ import annotations

from gateway import overlap
from gateway.overlap import OverlapGate
from gateway.store import base
from gateway.store.base import Admission, BucketView


def admitted(requests=(100, 90), input_tokens=(10_000, 9_000), output_tokens=(10_000, 9_000), **headroom):
    buckets = {base.REQUESTS: BucketView(requests[0], requests[1], 1.0),
               base.INPUT_TOKENS: BucketView(input_tokens[0], input_tokens[1], 1.0),
               base.OUTPUT_TOKENS: BucketView(output_tokens[0], output_tokens[1], 1.0)}
    return Admission(base.OK, buckets=buckets, headroom=headroom)


def test_a_key_is_admitted_first_until_the_store_has_answered_for_it():
    gate = OverlapGate(True)
    assert not gate.allows("k", 10, 10)
    gate.observe("k", admitted())
    assert gate.allows("k", 10, 10)
    assert not gate.allows("other", 10, 10)


def test_every_limit_must_keep_a_quarter_free_after_the_request():
    gate = OverlapGate(True)
    gate.observe("k", admitted(input_tokens=(10_000, 5_000)))
    assert gate.allows("k", 2_400, 10)  # 2,600 left >= 2,500
    gate.observe("k", admitted(input_tokens=(10_000, 5_000)))
    assert not gate.allows("k", 2_600, 10)  # 2,400 left < 2,500
    gate.observe("k", admitted(output_tokens=(1_000, 300)))
    assert not gate.allows("k", 10, 100)
    for name, pair in (("concurrency", (10, 2)), ("daily_tokens", (100_000, 20_000)),
                       ("monthly_tokens", (1_000_000, 200_000))):
        gate.observe("k", admitted(**{name: pair}))
        assert not gate.allows("k", 10, 10), name
        gate.observe("k", admitted(**{name: (pair[0], pair[0])}))
        assert gate.allows("k", 10, 10), name


def test_overlapped_requests_use_up_the_view_until_the_next_answer():
    gate = OverlapGate(True)
    gate.observe("k", admitted(requests=(8, 8)))
    # each overlapped request takes one of the 8 requests; the gate stops while 2 (a quarter) would still be left
    assert [gate.allows("k", 1, 1) for _ in range(8)] == [True] * 6 + [False] * 2
    gate.observe("k", admitted(requests=(8, 8)))
    assert gate.allows("k", 1, 1)


def test_a_refusal_a_fallback_or_an_old_answer_means_admit_first(monkeypatch):
    gate = OverlapGate(True)
    gate.observe("k", admitted())
    gate.observe("k", Admission(base.INPUT_TOKENS))
    assert not gate.allows("k", 1, 1)
    fallback = admitted()
    fallback.fallback = True
    gate.observe("k", fallback)
    assert not gate.allows("k", 1, 1)
    now = [1000.0]
    monkeypatch.setattr(overlap.time, "monotonic", lambda: now[0])
    gate.observe("k", admitted())
    now[0] += overlap.MAX_VIEW_AGE_S + 0.01
    assert not gate.allows("k", 1, 1)


def test_a_disabled_gate_never_overlaps():
    gate = OverlapGate(False)
    gate.observe("k", admitted())
    assert not gate.allows("k", 1, 1)
