"""The shipped Mooncake traces load from the checkout alone, gzipped or plain."""

from __future__ import annotations

import gzip
import json

from bench.traces import DEFAULT_TRACES, TraceRequest, load_mooncake_trace

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
