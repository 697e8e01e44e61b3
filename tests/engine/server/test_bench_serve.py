"""`sluicegate bench serve` end to end on a minimal load against the live replica."""

from __future__ import annotations

import json

from bench import serve


def test_bench_serve_runs_and_reports(live_server, capsys):
    argv = ["--url", live_server.url, "--num-requests", "6", "--input-len", "8", "--output-len", "4"]
    assert serve.main(argv + ["--max-concurrency", "3", "--ignore-eos", "--slo-ttft-ms", "600000", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["completed"] == 6 and report["failed"] == 0 and report["output_tokens"] == 24
    assert report["goodput_rps"] == report["request_throughput_rps"] > 0
    assert report["ttft_ms"]["p50"] <= report["e2e_ms"]["p50"]


def test_bench_serve_shared_prefix_chat_table(live_server, capsys):
    argv = ["--url", live_server.url, "--dataset", "shared-prefix", "--endpoint", "chat", "--num-requests", "4"]
    argv += ["--prefix-len", "40", "--num-prefixes", "1", "--input-len", "4", "--output-len", "2"]
    assert serve.main(argv) == 0
    table = capsys.readouterr().out
    assert "TTFT" in table and "4/4 ok" in table


def test_mooncake_dataset_shares_prefixes_like_the_trace(tmp_path):
    trace = tmp_path / "mooncake_conversation_trace.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": 64, "hash_ids": [1, 2]},
        {"timestamp": 500, "input_length": 1500, "output_length": 64, "hash_ids": [1, 2, 3]},
        {"timestamp": 900, "input_length": 600, "output_length": 64, "hash_ids": [4, 5]},
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = serve._parser().parse_args(["--url", "x", "--dataset", "mooncake", "--trace-file", str(trace)])
    args.scale = 1 / 64
    requests = serve.mooncake_dataset(args, None)
    assert [len(r.prompt.split()) for r in requests] == [16, 23, 9]
    assert requests[1].prompt.startswith(requests[0].prompt)
    assert requests[2].prompt.split()[:8] != requests[0].prompt.split()[:8]  # different hash ids, different text
    assert [r.arrival_s for r in requests] == [0.0, 0.5, 0.9] and requests[0].max_tokens == 1
