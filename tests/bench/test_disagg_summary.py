"""bench disagg's per-setup summary: the share of chat gaps a prefill stalled, which decides whether a per-token
ITL p99 can see the stalls at all."""

from __future__ import annotations

import pytest

from bench.disagg import Job, Result, _difference, summarize


def _chat(gaps_s: list[float]) -> Result:
    return Result(Job("chat", 0.0, [1, 2, 3], len(gaps_s) + 1), ttft_s=0.05, gaps_s=gaps_s)


def test_stalled_gaps_are_those_past_four_times_the_median():
    steady = [0.010] * 98
    row = summarize("co-located", [_chat(steady[:49] + [0.5]), _chat(steady[49:] + [0.039])])
    assert row["chat_itl_ms"]["p50"] == pytest.approx(10.0)
    assert row["chat_stalled_gap_share"] == pytest.approx(1 / 100)  # 0.5 s is stalled, 39 ms is not
    assert row["chat_max_gap_ms"]["p50"] == pytest.approx(39.0)


def test_long_prompts_and_failed_requests_do_not_count():
    long = Result(Job("long", 0.0, [1] * 300, 4), ttft_s=1.2, gaps_s=[2.0, 2.0])
    failed = Result(Job("chat", 0.0, [1], 4), error="HTTP 503")
    row = summarize("split", [_chat([0.01, 0.01, 0.01]), long, failed])
    assert row["errors"] == 1 and row["chat_stalled_gap_share"] == 0.0
    assert row["long_ttft_ms"]["p50"] == pytest.approx(1200.0)


def test_a_differing_output_says_which_request_and_where_the_texts_part():
    job = Job("chat", 0.0, [1, 2, 3], 8)
    diff = _difference(7, Result(job, text="abcdef"), Result(job, text="abcxyz"))
    assert diff == {"request": 7, "kind": "chat", "first_differing_char": 3, "chars": [6, 6], "errors": ["", ""]}
    cut = _difference(2, Result(job, text="abc"), Result(job, text="", error="HTTP 503"))
    assert cut["first_differing_char"] == 0 and cut["errors"] == ["", "HTTP 503"]
    longer = _difference(0, Result(job, text="abc"), Result(job, text="abcd"))
    assert longer["first_differing_char"] == 3
