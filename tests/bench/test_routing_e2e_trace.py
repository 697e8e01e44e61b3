"""bench routing's end-to-end trace replay: prompts built from Mooncake hash ids, arrivals scaled to a load."""

from __future__ import annotations

import json

import pytest

from bench.routing_e2e import E2eSettings, TraceSlice, _trace_workload


@pytest.fixture
def trace(tmp_path):
    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": 512, "hash_ids": [1, 2]},
        {"timestamp": 1000, "input_length": 1536, "output_length": 100, "hash_ids": [1, 2, 3]},
        {"timestamp": 4000, "input_length": 700, "output_length": 40, "hash_ids": [4, 5]},
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_shared_hash_ids_give_shared_word_prefixes_and_the_arrivals_fit_the_rate(trace):
    settings = E2eSettings(trace=trace, num_requests=3, block_words=8, max_tokens=16, trace_slice=TraceSlice.HEAD)
    jobs = _trace_workload(settings, rate=2.0, salt=0)
    # 3 requests over 4 s of trace is 0.5 req/s: at 2 req/s the same arrivals in a quarter of the time
    assert [job.offset_s for job in jobs] == pytest.approx([0.0, 0.25, 1.0])
    words = [job.prompt.split() for job in jobs]
    assert [len(w) for w in words] == [16, 24, 11]  # 8 words per 512 tokens
    assert words[1][:16] == words[0]  # hash ids 1, 2 shared
    assert words[2][:8] != words[0][:8]
    assert [job.max_tokens for job in jobs] == [8, 2, 1]  # the output scaled as the prompt, at least 1
    capped_settings = E2eSettings(
        trace=trace, num_requests=3, block_words=8, max_prompt_words=20, trace_slice=TraceSlice.HEAD
    )
    capped = _trace_workload(capped_settings, 2.0, 0)
    assert [len(job.prompt.split()) for job in capped] == [16, 20, 11]


def test_each_run_draws_its_own_words(trace):
    settings = E2eSettings(trace=trace, num_requests=3, block_words=8)
    first, second = _trace_workload(settings, 2.0, salt=0), _trace_workload(settings, 2.0, salt=1)
    assert all(a.prompt != b.prompt for a, b in zip(first, second))
    assert [len(a.prompt.split()) for a in first] == [len(b.prompt.split()) for b in second]


def test_the_session_slice_replays_whole_sessions_of_the_trace(trace):
    # hash id 1 starts a two-request session, 4 a one-request one; the fixed seed draws the two-request one first
    settings = E2eSettings(trace=trace, num_requests=2, block_words=8)
    assert settings.trace_slice is TraceSlice.SESSIONS
    words = [job.prompt.split() for job in _trace_workload(settings, rate=1.0, salt=0)]
    assert [len(w) for w in words] == [16, 24]
    assert words[1][:16] == words[0]
