"""OverlapGate: which admissions may overlap the upstream request (logic only; test_overlap.py runs it for real)."""

from __future__ import annotations

from gateway.request import overlap
from gateway.request.overlap import OverlapGate
from gateway.store import base
from gateway.store.base import Admission, BucketView


def admitted(requests=(100, 90), input_tokens=(10_000, 9_000), output_tokens=(10_000, 9_000), **headroom):
    buckets = {
        base.REQUESTS: BucketView(requests[0], requests[1], 1.0),
        base.INPUT_TOKENS: BucketView(input_tokens[0], input_tokens[1], 1.0),
        base.OUTPUT_TOKENS: BucketView(output_tokens[0], output_tokens[1], 1.0),
    }
    return Admission(base.OK, buckets=buckets, headroom=headroom)


def test_a_key_is_admitted_first_until_the_store_has_answered_for_it():
    gate = OverlapGate(True)
    assert gate.allows("t", "k", 10, 10) is None
    gate.answered("t", "k", None, admitted())
    assert gate.allows("t", "k", 10, 10) is not None
    assert gate.allows("t", "other", 10, 10) is None  # another key of the tenant: its own buckets are unknown


def test_every_limit_must_keep_a_quarter_free_after_the_request():
    gate = OverlapGate(True)
    gate.answered("t", "k", None, admitted(input_tokens=(10_000, 5_000)))
    assert gate.allows("t", "k", 2_400, 10)  # 2,600 left >= 2,500
    gate.answered("t", "k", None, admitted(input_tokens=(10_000, 5_000)))
    assert not gate.allows("t", "k", 2_600, 10)  # 2,400 left < 2,500
    gate.answered("t", "k", None, admitted(output_tokens=(1_000, 300)))
    assert not gate.allows("t", "k", 10, 100)
    for name, pair in (
        ("concurrency", (10, 2)),
        ("daily_tokens", (100_000, 20_000)),
        ("monthly_tokens", (1_000_000, 200_000)),
    ):
        gate.answered("t", "k", None, admitted(**{name: pair}))
        assert not gate.allows("t", "k", 10, 10), name
        gate.answered("t", "k", None, admitted(**{name: (pair[0], pair[0])}))
        assert gate.allows("t", "k", 10, 10), name


def test_overlapped_requests_use_up_the_view_until_the_next_answer():
    gate = OverlapGate(True)
    gate.answered("t", "k", None, admitted(requests=(8, 8)))
    # each overlapped request takes one of the 8 requests; the gate stops while 2 (a quarter) would still be left
    assert [gate.allows("t", "k", 1, 1) is not None for _ in range(8)] == [True] * 6 + [False] * 2


def test_an_answer_for_one_request_does_not_free_what_the_others_still_hold():
    gate = OverlapGate(True)
    gate.answered("t", "k", None, admitted(requests=(8, 8)))
    held = [gate.allows("t", "k", 1, 1) for _ in range(6)]
    # Redis ran only the first script: 7 left by its count, but 5 more are on their way
    gate.answered("t", "k", held[0], admitted(requests=(8, 7)))
    assert gate.allows("t", "k", 1, 1) is None  # 7 - 5 held - 1 = 1 < 2
    for needs in held[1:]:  # the rest answered: Redis counted them all by now
        gate.answered("t", "k", needs, admitted(requests=(8, 2)))
    gate.answered("t", "k", None, admitted(requests=(8, 8)))  # a minute later, refilled
    assert gate.allows("t", "k", 1, 1) is not None


def test_the_tenants_concurrency_and_budgets_are_shared_by_its_keys():
    gate = OverlapGate(True)
    for key in "abcd":
        gate.answered("t", key, None, admitted(concurrency=(8, 6)))
    started = sum(gate.allows("t", key, 1, 1) is not None for key in "abcd" for _ in range(8))
    assert started == 4  # 6 free slots, of which a quarter of 8 must stay free


def test_a_refusal_a_failure_a_fallback_or_an_old_answer_means_admit_first(monkeypatch):
    gate = OverlapGate(True)
    gate.answered("t", "k", None, admitted())
    gate.answered("t", "k", None, Admission(base.INPUT_TOKENS))
    assert gate.allows("t", "k", 1, 1) is None
    gate.answered("t", "k", None, admitted())
    gate.answered("t", "k", None, None)  # the script failed (Redis error, timeout)
    assert gate.allows("t", "k", 1, 1) is None
    fallback = admitted()
    fallback.fallback = True
    gate.answered("t", "k", None, fallback)
    assert gate.allows("t", "k", 1, 1) is None
    now = [1000.0]
    monkeypatch.setattr(overlap.time, "monotonic", lambda: now[0])
    gate.answered("t", "k", None, admitted())
    now[0] += overlap.MAX_VIEW_AGE_S + 0.01
    assert gate.allows("t", "k", 1, 1) is None


def test_a_disabled_gate_never_overlaps():
    gate = OverlapGate(False)
    gate.answered("t", "k", None, admitted())
    assert gate.allows("t", "k", 1, 1) is None


def test_the_keys_of_one_tenant_share_its_buckets():
    """Each key's view is the tighter of tenant and key; the tenant's own bucket is shared by all its keys, so what
    one key's overlapped requests take must count against the others too."""
    gate = OverlapGate(True)
    for key in ("a", "b"):  # each key sees 8 of the tenant's 8 requests left
        answer = admitted(requests=(8, 8))
        answer.headroom = {base.REQUESTS: (8, 8)}
        gate.answered("t", key, None, answer)
    sent = [gate.allows("t", key, 1, 1) is not None for key in ("a", "b") * 4]
    assert sent == [True] * 6 + [False] * 2  # 6 in all, not 6 per key
