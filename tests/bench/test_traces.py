"""The shipped Mooncake traces load from the checkout alone, gzipped or plain; slices of them keep their reuse."""

from __future__ import annotations

import gzip
import json

from bench.traces import DEFAULT_TRACES, TraceRequest, load_mooncake_trace, sample_sessions

# Request counts from the upstream release (bench/data/workloads/README.md).
_UPSTREAM_REQUESTS = {"conversation": 12_031, "synthetic": 3_993}


def test_shipped_traces_are_whole():
    assert set(DEFAULT_TRACES) == set(_UPSTREAM_REQUESTS)
    for name, path in DEFAULT_TRACES.items():
        requests = load_mooncake_trace(path)
        assert len(requests) == _UPSTREAM_REQUESTS[name]
        assert all(r.block_hashes and r.prompt_tokens > 0 for r in requests)
        arrivals_s = [r.arrival_s for r in requests]
        assert arrivals_s == sorted(arrivals_s)


def test_plain_and_gzipped_read_the_same(tmp_path):
    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": 64, "hash_ids": [1, 2]},
        {"timestamp": 1500, "input_length": 600, "output_length": 8, "hash_ids": [1, 3]},
    ]
    text = "".join(json.dumps(r) + "\n" for r in rows) + "\n"  # a trailing blank line is skipped
    plain = tmp_path / "trace.jsonl"
    plain.write_text(text)
    packed = tmp_path / "trace.jsonl.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    expected = [TraceRequest(0.0, 1024, 64, [1, 2]), TraceRequest(1.5, 600, 8, [1, 3])]
    assert load_mooncake_trace(plain) == expected
    assert load_mooncake_trace(str(packed)) == expected
    assert load_mooncake_trace(packed, limit=1) == expected[:1]


def _unbounded_reuse(requests: list[TraceRequest]) -> float:
    """Share of the requests' blocks that an earlier request had: one cache with no bound."""
    seen: set[int] = set()
    hits = total = 0
    for request in requests:
        hits += sum(h in seen for h in request.block_hashes)
        total += len(request.block_hashes)
        seen.update(request.block_hashes)
    return hits / total


def test_a_session_sample_keeps_sessions_whole_past_a_prefix_every_request_shares():
    root = 999  # a system prompt every request starts with
    requests = [TraceRequest(float(i), 1024, 8, [root, 100 + i % 5, 1000 + i]) for i in range(40)]
    sample = sample_sessions(requests, 16, seed=3, max_shared_fraction=0.2)
    assert len(sample) == 16
    assert [r.arrival_s for r in sample] == sorted(r.arrival_s for r in sample)  # trace order
    sessions = {r.block_hashes[1] for r in sample}
    assert len(sessions) == 2  # 8 requests a session: two whole ones, not 16 scattered requests
    assert all(sum(r.block_hashes[1] == s for r in sample) == 8 for s in sessions)
    assert sample_sessions(requests, 16, seed=3, max_shared_fraction=0.2) == sample  # seeded
    assert sample_sessions(requests, 16, seed=4, max_shared_fraction=0.2) != sample


def test_a_session_sample_of_a_shipped_trace_reuses_like_the_whole_trace_and_its_head_does_not():
    requests = load_mooncake_trace(DEFAULT_TRACES["conversation"])
    whole = _unbounded_reuse(requests)
    sample = sample_sessions(requests, 240, seed=0)
    assert len(sample) == 240
    assert _unbounded_reuse(sample) > 0.6 * whole > 2 * _unbounded_reuse(requests[:240])
