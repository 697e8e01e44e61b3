"""`sluicegate bench routing [--json]`: replica-selection policies on the Mooncake traces (part 1, simulation).

For each trace in ../shared/workloads and each replica count (4 and 8), every policy replays the trace against
simulated replicas (bench/routing_sim.py: an LRU prefix cache of C blocks each, a FIFO prefill server, batched
decodes). C = cache_fraction * (distinct blocks in the trace) / N, so the cluster holds only part of the working
set. Rows:

  ceiling              one unbounded cache for all requests: no router can beat its hit rate
  pooled_lru           one LRU cache of N * C blocks (perfect routing with no duplicated prefixes)
  round_robin, least_loaded, consistent_hash        the live router's policies
  sglang_style         SGLang's cache-aware rule over an approximate tree of routing history
                       (bench/routing_baselines.py)
  prefix_affinity      ours, precise index (the replicas' KV events)
  prefix_affinity_hist ours, approximate index (routing history, TTL), as for replicas without a feed

Goal (issue 5): prefix_affinity reaches >= 90% of the ceiling's hit rate with max/mean load <= 1.25 and beats
sglang_style on both. `--limit N` replays only the first N requests (smoke runs). `--drop-fraction F --seed S`
replays the trace less a random F of its requests: hit rates a few hundredths of a point apart change order
between such replays, so compare policies over several seeds, not on one replay.

`--e2e` adds part 2 (bench/routing_e2e.py): the gateway in front of real engine replicas, prefix affinity vs
round robin, replica-side hit rate, TTFT and throughput. `--e2e-only` skips the simulation.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import asdict
from pathlib import Path

from bench.routing_baselines import SglangStylePolicy
from bench.routing_e2e import E2eSettings, print_e2e, run_e2e
from bench.routing_sim import ServiceModel, SimResult, ceiling_hit_rate, load_trace, simulate
from gateway.routing.config import IndexConfig, PolicyConfig
from gateway.routing.history_index import HistoryIndex
from gateway.routing.policies import make_policy

_WORKLOADS = Path(__file__).resolve().parents[2] / "shared" / "workloads"
_TRACES = ("conversation", "synthetic")
_GOAL_CEILING_FRACTION = 0.9
_GOAL_MAX_OVER_MEAN = 1.25


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluicegate bench routing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--workloads", default=str(_WORKLOADS), help="folder of mooncake_*_trace.jsonl")
    parser.add_argument("--traces", default=",".join(_TRACES), help="comma-separated: conversation,synthetic")
    parser.add_argument("--replicas", default="4,8", help="comma-separated replica counts")
    parser.add_argument("--cache-fraction", type=float, default=0.5, help="cluster cache / distinct trace blocks")
    parser.add_argument("--prefill-tokens-per-s", type=float, default=10_000.0)
    parser.add_argument("--decode-s-per-token", type=float, default=0.02)
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N requests of each trace")
    parser.add_argument("--drop-fraction", type=float, default=0.0, help="drop this random fraction of requests")
    parser.add_argument("--seed", type=int, default=0, help="random seed of --drop-fraction")
    parser.add_argument("--e2e", action="store_true", help="also run part 2: gateway + real engine replicas")
    parser.add_argument("--e2e-only", action="store_true", help="run only part 2")
    parser.add_argument("--e2e-replicas", type=int, default=E2eSettings.num_replicas)
    parser.add_argument("--e2e-preset", default=E2eSettings.preset, help="engine model preset (tiny, small, medium)")
    parser.add_argument("--e2e-requests", type=int, default=E2eSettings.num_requests)
    parser.add_argument("--e2e-concurrency", type=int, default=E2eSettings.concurrency)
    parser.add_argument("--e2e-kv-blocks", type=int, default=E2eSettings.num_kv_blocks, help="KV blocks per replica")
    return parser


def _policy_runs(num_replicas: int, cache_blocks: int):
    """(label, policy, index, history) per row; a fresh policy and history per run."""
    history_blocks = num_replicas * cache_blocks
    defaults = PolicyConfig()
    return [
        ("round_robin", make_policy(PolicyConfig(name="round_robin")), "precise", None),
        ("least_loaded", make_policy(PolicyConfig(name="least_loaded")), "precise", None),
        ("consistent_hash", make_policy(PolicyConfig(name="consistent_hash")), "precise", None),
        ("sglang_style", SglangStylePolicy(), "history", HistoryIndex(float("inf"), history_blocks)),
        ("prefix_affinity", make_policy(defaults), "precise", None),
        (
            "prefix_affinity_hist",
            make_policy(defaults),
            "history",
            HistoryIndex(IndexConfig().history_ttl_s, history_blocks),
        ),
    ]


def run_config(requests, trace: str, num_replicas: int, args) -> dict:
    distinct_blocks = len({h for r in requests for h in r.block_hashes})
    cache_blocks = max(1, int(args.cache_fraction * distinct_blocks / num_replicas))
    service = ServiceModel(args.prefill_tokens_per_s, args.decode_s_per_token)
    ceiling = ceiling_hit_rate(requests, None)
    rows = [
        {"policy": "ceiling", "hit_rate": ceiling},
        {"policy": "pooled_lru", "hit_rate": ceiling_hit_rate(requests, num_replicas * cache_blocks)},
    ]
    for label, policy, index, history in _policy_runs(num_replicas, cache_blocks):
        started_s = time.perf_counter()
        result: SimResult = simulate(requests, policy, num_replicas, cache_blocks, service, index, history, label)
        rows.append({**asdict(result), "sim_s": round(time.perf_counter() - started_s, 2)})
    by_policy = {row["policy"]: row for row in rows}
    ours, sglang = by_policy["prefix_affinity"], by_policy["sglang_style"]
    goal = {
        "hit_rate_vs_ceiling": ours["hit_rate"] / ceiling,
        "reaches_90pct_of_ceiling": ours["hit_rate"] >= _GOAL_CEILING_FRACTION * ceiling,
        "max_over_mean_within_1_25": ours["max_over_mean_load"] <= _GOAL_MAX_OVER_MEAN,
        "beats_sglang_hit_rate": ours["hit_rate"] > sglang["hit_rate"],
        "beats_sglang_balance": ours["max_over_mean_load"] < sglang["max_over_mean_load"],
    }
    return {
        "trace": trace,
        "num_replicas": num_replicas,
        "cache_blocks_per_replica": cache_blocks,
        "distinct_blocks": distinct_blocks,
        "num_requests": len(requests),
        "rows": rows,
        "goal": goal,
    }


def _print_table(results: list[dict], args) -> None:
    print(
        f"Routing replay: cache_fraction={args.cache_fraction}, prefill {args.prefill_tokens_per_s:.0f} tok/s/replica, "
        f"decode {args.decode_s_per_token * 1000:.0f} ms/token; load = time-averaged in-flight requests"
    )
    header = f"{'trace':<13}{'N':>3}{'C':>7}  {'policy':<21}{'hit':>7}{'/ceil':>7}{'max/mean':>9}{'ttft':>8}{'p90':>8}"
    for result in results:
        print()
        print(header)
        ceiling = result["rows"][0]["hit_rate"]
        for row in result["rows"]:
            load = f"{row['max_over_mean_load']:9.3f}" if "max_over_mean_load" in row else " " * 9
            ttft = f"{row['ttft_mean_s']:7.2f}s{row['ttft_p90_s']:7.2f}s" if "ttft_mean_s" in row else ""
            print(
                f"{result['trace']:<13}{result['num_replicas']:>3}{result['cache_blocks_per_replica']:>7}  "
                f"{row['policy']:<21}{row['hit_rate']:7.1%}{row['hit_rate'] / ceiling:7.1%}{load}{ttft}"
            )
        goal = result["goal"]
        print(
            f"  goal: {goal['hit_rate_vs_ceiling']:.1%} of ceiling (>=90%: {goal['reaches_90pct_of_ceiling']}), "
            f"max/mean <= 1.25: {goal['max_over_mean_within_1_25']}, beats sglang_style on hit rate: "
            f"{goal['beats_sglang_hit_rate']}, on balance: {goal['beats_sglang_balance']}"
        )


def _simulation(args) -> list[dict] | None:
    results = []
    for trace in args.traces.split(","):
        path = Path(args.workloads) / f"mooncake_{trace}_trace.jsonl"
        if not path.is_file():
            print(f"sluicegate bench routing: no trace at {path} (see --workloads)", file=sys.stderr)
            return None
        requests = load_trace(str(path), args.limit)
        if args.drop_fraction:
            rng = random.Random(args.seed)
            requests = [r for r in requests if rng.random() > args.drop_fraction]
        for num_replicas in (int(n) for n in args.replicas.split(",")):
            results.append(run_config(requests, trace, num_replicas, args))
    return results


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    output: dict = {"benchmark": "routing", "settings": vars(args)}
    if not args.e2e_only:
        results = _simulation(args)
        if results is None:
            return 2
        output["simulation"] = results
        if not args.json:
            _print_table(results, args)
    if args.e2e or args.e2e_only:
        settings = E2eSettings(
            num_replicas=args.e2e_replicas,
            preset=args.e2e_preset,
            num_requests=args.e2e_requests,
            concurrency=args.e2e_concurrency,
            num_kv_blocks=args.e2e_kv_blocks,
        )
        output["end_to_end"] = run_e2e(settings, ["prefix_affinity", "round_robin"])
        if not args.json:
            print_e2e(output["end_to_end"])
    if args.json:
        print(json.dumps(output))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
