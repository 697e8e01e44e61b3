"""`sluicegate bench NAME [ARGS...]` -> bench/NAME.py's main(argv)."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "engine": "our engine vs transformers (padded generate, continuous batching) on CPU; speculative decoding",
    "serve": "load generator for any OpenAI-compatible server: throughput, TTFT, TPOT, ITL, goodput",
    "gateway": "gateway overhead vs a bare pass-through and LiteLLM",
    "disagg": "1 prefill + 1 decode replica (KV over NIXL) vs 2 co-located ones: TTFT, ITL, transfer cost",
    "routing": "routing policies on Mooncake trace replay, and end to end across real replicas",
    "guardrails": "PII precision/recall/latency and prompt-injection detection quality",
    "console": "admin console page latency with 1,000 tenants",
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in BENCHMARKS:
        print("usage: sluicegate bench NAME [--json] [ARGS...]\n\nbenchmarks:")
        for name, text in BENCHMARKS.items():
            print(f"  {name:<11} {text}")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(f"bench.{argv[0]}")
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
