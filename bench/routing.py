"""`sluicegate bench routing`: replica-selection policies replayed on Mooncake traces in a simulated cluster.

Each cell (trace x utilisation x replica count) replays the trace `--replays` times, each replay without a seeded
random `--drop-fraction` of its requests, through every policy on a cluster of simulated replicas that batch like
our engine (bench/sim: step-time profile, token budget, chunked prefill, shared KV with a prefix cache evicting by `--prefix-eviction`,
preemption). Arrivals keep the trace's timestamps, scaled so the work offered (with no cache hits) is the target
utilisation of the cluster. The cluster's cache is `--cache-fraction` of the trace's distinct blocks, split evenly.

Rows per cell: TTFT p50/p90/p99, prefix hit rate and prefill-work max/mean over replicas, each the mean over replays
with its 95% confidence half-width; and the hit-rate bounds at the cluster's cache size (bench/sim/bounds.py):
ceiling (unbounded), pooled LRU and pooled OPT (Belady); and the TTFT floor: each request alone on an idle replica
with every hit the unbounded cache gives it (no routing can go below it).

Policies: round robin, least loaded (queued prefill tokens), consistent hashing with bounded loads, SGLang's
cache-aware router, llm-d's precise prefix scorer with its queue and KV scorers (bench/routing_baselines.py, each
at its defaults), prefix affinity (our previous default) and expected TTFT (ours,
gateway/routing/policies/expected_ttft.py, the gateway's default).

Goals (issue 16), per cell: ours' TTFT p50 and p99 <= 0.85x the best baseline's, with the 95% interval of the
paired per-replay difference below zero; at cache fraction 0.2 ours' hit rate closes >= 50% of the gap from pooled
LRU to pooled OPT with prefill-work max/mean <= 1.25.

`--e2e` adds part 2 (bench/routing_e2e.py): the gateway in front of real engine replicas.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.routing_baselines import LeastQueuedPrefillPolicy, LlmdPrecisePolicy
from bench.routing_e2e import E2eSettings, TraceSlice, print_e2e, run_e2e
from bench.sim.bounds import ceiling_hit_rate, pooled_lru_hit_rate, pooled_opt_hit_rate, ttft_floor_s
from bench.sim.cluster import ClusterSpec, RunResult, simulate, time_scale
from bench.sim.kv import BLOCK_TOKENS
from bench.sim.profiles import PROFILES
from bench.sim.stats import mean_ci95, percentile, t95
from bench.traces import DEFAULT_TRACES, TraceRequest, load_mooncake_trace
from engine.prefix_eviction import PrefixEviction
from gateway.routing.config import PolicyConfig
from gateway.routing.history_index import HistoryIndex
from gateway.routing.policies import make_policy

OURS = "expected_ttft"
BASELINES = ("round_robin", "least_loaded", "consistent_hash", "sglang_cache_aware", "llmd_precise")
POLICIES = (*BASELINES, "prefix_affinity", OURS)
METRICS = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "hit_rate", "work_max_over_mean")
GOAL_TTFT_RATIO = 0.85
GOAL_GAP_CLOSED = 0.5
GOAL_WORK_MAX_OVER_MEAN = 1.25


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluicegate bench routing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    parser.add_argument(
        "--trace",
        action="append",
        default=None,
        help=f"Mooncake-format .jsonl[.gz], or a shipped trace's name ({', '.join(DEFAULT_TRACES)}); repeatable; "
        "default: the shipped traces",
    )
    parser.add_argument("--utilisation", default="0.6,0.85", help="comma-separated offered load (no-cache work)")
    parser.add_argument("--replicas", default="4,8,16", help="comma-separated replica counts")
    parser.add_argument("--replays", type=int, default=5, help="replays per cell, each with a seeded drop")
    parser.add_argument("--drop-fraction", type=float, default=0.1, help="requests each replay leaves out")
    parser.add_argument("--cache-fraction", type=float, default=0.2, help="cluster cache / distinct trace blocks")
    parser.add_argument(
        "--prefix-eviction",
        default=PrefixEviction.GDSF.value,
        choices=[e.value for e in PrefixEviction],
        help="the replicas' prefix-cache eviction (the engine's --prefix-eviction)",
    )
    parser.add_argument("--profile", default="h100-llama3-8b", choices=sorted(PROFILES), help="step-time profile")
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N requests of each trace")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated subset of the policies")
    parser.add_argument("--e2e", action="store_true", help="also run part 2: gateway + real engine replicas")
    parser.add_argument("--e2e-only", action="store_true", help="run only part 2")
    parser.add_argument("--e2e-replicas", type=int, default=E2eSettings.num_replicas)
    parser.add_argument("--e2e-preset", default=E2eSettings.preset, help="engine model preset (tiny, small, medium)")
    parser.add_argument("--e2e-requests", type=int, default=E2eSettings.num_requests)
    parser.add_argument("--e2e-concurrency", type=int, default=E2eSettings.concurrency)
    parser.add_argument("--e2e-kv-blocks", type=int, default=E2eSettings.num_kv_blocks, help="KV blocks per replica")
    parser.add_argument("--e2e-trace", default=None, help="replay a Mooncake trace (a name or a path), open loop")
    parser.add_argument(
        "--e2e-rates",
        default=",".join(f"{rate:g}" for rate in E2eSettings.rates),
        help="trace replay: comma-separated loads in requests per second",
    )
    parser.add_argument(
        "--e2e-slice",
        choices=[choice.value for choice in TraceSlice],
        default=E2eSettings.trace_slice.value,
        help="trace replay: whole sessions from the entire trace (keeps its reuse) or its first requests",
    )
    parser.add_argument(
        "--e2e-slice-seed", type=int, default=E2eSettings.slice_seed, help="trace replay: which sessions are drawn"
    )
    parser.add_argument("--e2e-block-words", type=int, default=E2eSettings.block_words)
    parser.add_argument("--e2e-max-tokens", type=int, default=E2eSettings.max_tokens)
    parser.add_argument("--e2e-max-prompt-words", type=int, default=E2eSettings.max_prompt_words)
    parser.add_argument(
        "--e2e-policies",
        default=f"{OURS},least_loaded,round_robin",
        help="comma-separated gateway routing policies for part 2, each with a fresh gateway",
    )
    return parser


def _make(policy: str, history_blocks: int, seed: int):
    """(policy, index kind, history) for one run: a fresh instance each time, nothing carried between runs."""
    if policy == "round_robin":
        return make_policy(PolicyConfig(name="round_robin")), "precise", None
    if policy == "least_loaded":
        return LeastQueuedPrefillPolicy(), "precise", None
    if policy == "consistent_hash":
        return make_policy(PolicyConfig(name="consistent_hash")), "precise", None
    if policy == "sglang_cache_aware":  # its tree: where it routed, bounded like its max_tree_size
        return (
            make_policy(PolicyConfig(name="sglang_cache_aware")),
            "history",
            HistoryIndex(float("inf"), history_blocks),
        )
    if policy == "llmd_precise":
        return LlmdPrecisePolicy(seed=seed), "precise", None
    return make_policy(PolicyConfig(name=policy)), "precise", None


def _replay(requests: Sequence[TraceRequest], seed: int, drop_fraction: float) -> list[TraceRequest]:
    rng = random.Random(seed)
    return [r for r in requests if rng.random() >= drop_fraction]


def _summary(result: RunResult) -> dict[str, float]:
    work = result.prefill_tokens_per_replica
    ttft_s = sorted(result.ttft_s)
    return {
        "ttft_p50_s": percentile(ttft_s, 0.5),
        "ttft_p90_s": percentile(ttft_s, 0.9),
        "ttft_p99_s": percentile(ttft_s, 0.99),
        "hit_rate": result.hit_rate,
        "work_max_over_mean": max(work) / statistics.fmean(work) if any(work) else 1.0,
        "preemptions": result.preemptions,
    }


def run_cell(requests: list[TraceRequest], trace: str, utilisation: float, num_replicas: int, args) -> dict:
    profile = PROFILES[args.profile]
    policies = args.policies.split(",")
    per_policy: dict[str, list[dict]] = {p: [] for p in policies}
    floors: list[dict] = []
    bounds: dict[str, list[float]] = {"ceiling": [], "pooled_lru": [], "pooled_opt": []}
    started_s = time.perf_counter()
    for seed in range(args.replays):
        replay = _replay(requests, seed, args.drop_fraction)
        distinct_blocks = len({h for r in replay for h in r.block_hashes})
        cluster_blocks = max(1, int(args.cache_fraction * distinct_blocks))
        bounds["ceiling"].append(ceiling_hit_rate(replay))
        bounds["pooled_lru"].append(pooled_lru_hit_rate(replay, cluster_blocks))
        bounds["pooled_opt"].append(pooled_opt_hit_rate(replay, cluster_blocks))
        floor_s = sorted(ttft_floor_s(replay, profile))
        floors.append({f"ttft_p{q}_s": percentile(floor_s, q / 100) for q in (50, 90, 99)})
        # A replica always fits two of the largest requests, however small the fraction (smoke runs).
        largest = max(r.prompt_tokens + r.output_tokens for r in replay)
        capacity = max(cluster_blocks * BLOCK_TOKENS // num_replicas, 2 * (largest + BLOCK_TOKENS))
        scale = time_scale(replay, profile, num_replicas, utilisation)
        spec = ClusterSpec(profile, num_replicas, capacity, scale, PrefixEviction(args.prefix_eviction))
        for name in policies:
            policy, index, history = _make(name, cluster_blocks, seed)
            per_policy[name].append(_summary(simulate(replay, spec, policy, index, history, name)))
    print(
        f"  {trace}, utilisation {utilisation}, {num_replicas} replicas: {time.perf_counter() - started_s:.0f} s",
        file=sys.stderr,
    )  # progress: a full run takes minutes
    rows = [_row(name, runs) for name, runs in per_policy.items()]
    bound_rows = {name: mean_ci95(values) for name, values in bounds.items()}
    return {
        "trace": trace,
        "utilisation": utilisation,
        "num_replicas": num_replicas,
        "num_requests": len(requests),
        "replays": args.replays,
        "bounds": {name: {"mean": m, "ci95": h} for name, (m, h) in bound_rows.items()},
        "ttft_floor": {m: dict(zip(("mean", "ci95"), mean_ci95([f[m] for f in floors]))) for m in floors[0]},
        "rows": rows,
        "goal": _goal(per_policy, bounds, args.cache_fraction),
        "sim_s": round(time.perf_counter() - started_s, 1),
    }


def _row(name: str, runs: list[dict]) -> dict:
    row: dict = {"policy": name}
    for metric in METRICS:
        mean, half = mean_ci95([run[metric] for run in runs])
        row[metric] = {"mean": mean, "ci95": half}
    row["preemptions"] = statistics.fmean(run["preemptions"] for run in runs)
    return row


def _paired_diff_ci(ours: list[float], theirs: list[float]) -> tuple[float, float]:
    diffs = [a - b for a, b in zip(ours, theirs)]
    mean = statistics.fmean(diffs)
    half = t95(len(diffs) - 1) * statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else 0.0
    return mean, half


def _goal(per_policy: dict[str, list[dict]], bounds: dict[str, list[float]], cache_fraction: float) -> dict:
    if OURS not in per_policy or not any(b in per_policy for b in BASELINES):
        return {}
    goal: dict = {}
    for metric in ("ttft_p50_s", "ttft_p99_s"):
        baselines = {b: [run[metric] for run in per_policy[b]] for b in BASELINES if b in per_policy}
        best = min(baselines, key=lambda b: statistics.fmean(baselines[b]))
        ours = [run[metric] for run in per_policy[OURS]]
        diff, half = _paired_diff_ci(ours, baselines[best])
        ratio = statistics.fmean(ours) / statistics.fmean(baselines[best])
        goal[metric] = {
            "best_baseline": best,
            "ratio": ratio,
            "diff_s": diff,
            "diff_ci95": half,
            "met": ratio <= GOAL_TTFT_RATIO and diff + half < 0,
        }
    lru, opt = statistics.fmean(bounds["pooled_lru"]), statistics.fmean(bounds["pooled_opt"])
    hit = statistics.fmean(run["hit_rate"] for run in per_policy[OURS])
    work = statistics.fmean(run["work_max_over_mean"] for run in per_policy[OURS])
    closed = (hit - lru) / (opt - lru) if opt > lru else float("nan")
    goal["cache"] = {
        "cache_fraction": cache_fraction,
        "gap_closed": closed,
        "work_max_over_mean": work,
        "met": closed >= GOAL_GAP_CLOSED and work <= GOAL_WORK_MAX_OVER_MEAN,
    }
    return goal


def _traces(args) -> list[tuple[str, Path]] | None:
    named = args.trace or list(DEFAULT_TRACES)
    traces = []
    for item in named:
        path = DEFAULT_TRACES.get(item, Path(item))
        if not path.is_file():
            print(
                f"sluicegate bench routing: no trace at {path} (give a file or one of {', '.join(DEFAULT_TRACES)})",
                file=sys.stderr,
            )
            return None
        traces.append((item if item in DEFAULT_TRACES else path.name, path))
    return traces


def _fmt(cell: dict) -> str:
    return f"{cell['mean']:.2f}±{cell['ci95']:.2f}"


def _print_cells(cells: list[dict], args) -> None:
    print(
        f"Routing simulation: profile {args.profile}, cache fraction {args.cache_fraction}, prefix eviction "
        f"{args.prefix_eviction}, {args.replays} replays "
        f"(each without {args.drop_fraction:.0%} of requests); mean ± 95% CI half-width over replays"
    )
    for cell in cells:
        bounds = cell["bounds"]
        print(
            f"\n{cell['trace']}  util {cell['utilisation']}  {cell['num_replicas']} replicas  "
            f"({cell['num_requests']} requests, {cell['sim_s']} s)   hit-rate bounds: ceiling "
            f"{bounds['ceiling']['mean']:.1%}, pooled LRU {bounds['pooled_lru']['mean']:.1%}, "
            f"pooled OPT {bounds['pooled_opt']['mean']:.1%}"
        )
        print(f"  {'policy':<20}{'TTFT p50 s':>13}{'p90 s':>13}{'p99 s':>14}{'hit rate':>15}{'work max/mean':>15}")
        floor = cell["ttft_floor"]
        print(
            f"  {'floor (TTFT only)':<20}{_fmt(floor['ttft_p50_s']):>13}{_fmt(floor['ttft_p90_s']):>13}"
            f"{_fmt(floor['ttft_p99_s']):>14}"
        )
        for row in cell["rows"]:
            hit = row["hit_rate"]
            print(
                f"  {row['policy']:<20}{_fmt(row['ttft_p50_s']):>13}{_fmt(row['ttft_p90_s']):>13}"
                f"{_fmt(row['ttft_p99_s']):>14}{hit['mean']:>9.1%}±{hit['ci95']:.1%}"
                f"{_fmt(row['work_max_over_mean']):>15}"
            )
        goal = cell["goal"]
        if goal:
            parts = [
                f"{m[5:8]} {goal[m]['ratio']:.2f}x {goal[m]['best_baseline']} (diff {goal[m]['diff_s']:+.2f}"
                f"±{goal[m]['diff_ci95']:.2f} s, {'met' if goal[m]['met'] else 'NOT met'})"
                for m in ("ttft_p50_s", "ttft_p99_s")
            ]
            cache = goal["cache"]
            parts.append(
                f"cache {'met' if cache['met'] else 'NOT met'} (gap closed {cache['gap_closed']:.0%}, goal >= "
                f"{GOAL_GAP_CLOSED:.0%}; work max/mean {cache['work_max_over_mean']:.2f}, goal <= "
                f"{GOAL_WORK_MAX_OVER_MEAN})"
            )
            print("  goal: " + "; ".join(parts))


def _simulation(args) -> list[dict] | None:
    traces = _traces(args)
    if traces is None:
        return None
    cells = []
    for name, path in traces:
        requests = load_mooncake_trace(path, args.limit)
        for utilisation in (float(u) for u in args.utilisation.split(",")):
            for num_replicas in (int(n) for n in args.replicas.split(",")):
                cells.append(run_cell(requests, name, utilisation, num_replicas, args))
    return cells


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    output: dict = {"benchmark": "routing", "settings": vars(args)}
    if not args.e2e_only:
        cells = _simulation(args)
        if cells is None:
            return 2
        output["simulation"] = cells
        if not args.json:
            _print_cells(cells, args)
    if args.e2e or args.e2e_only:
        settings = E2eSettings(
            num_replicas=args.e2e_replicas,
            preset=args.e2e_preset,
            num_requests=args.e2e_requests,
            concurrency=args.e2e_concurrency,
            num_kv_blocks=args.e2e_kv_blocks,
            max_tokens=args.e2e_max_tokens,
            trace=args.e2e_trace,
            rates=tuple(float(rate) for rate in args.e2e_rates.split(",")),
            trace_slice=TraceSlice(args.e2e_slice),
            slice_seed=args.e2e_slice_seed,
            block_words=args.e2e_block_words,
            max_prompt_words=args.e2e_max_prompt_words,
        )
        output["end_to_end"] = run_e2e(settings, args.e2e_policies.split(","))
        if not args.json:
            print_e2e(output["end_to_end"])
    if args.json:
        print(json.dumps(output))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
