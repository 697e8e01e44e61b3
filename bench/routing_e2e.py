"""Part 2 of `sluicegate bench routing`: the gateway in front of real engine replicas, prefix affinity vs round robin.

N engine replicas (default 3, the `small` preset, made offline in a temp folder) each get a KV pool that holds about
half of the workload's distinct prefixes, so where a request goes decides whether its prefix is warm. For each
policy a fresh gateway (in-process store, one tenant) is started in front of the same replicas and a shared-prefix
workload is sent through it with streaming completions: `--num-prefixes` groups of `--prefix-words` words, each
request one group's prefix plus a random suffix, at `--concurrency`. Each policy gets prefixes of its own, so the
first run does not warm the second. Reported per policy: the replicas' own prefix-cache hit rate
(delta of vllm:prefix_cache_hits / vllm:prefix_cache_queries), the prefix the router believed the chosen replica
held (sluicegate_routing_matched_prefix_tokens / prompt_tokens: close to the replica's figure when the gateway's
hashes and the replicas' KV events agree), TTFT mean/p50/p90/p99 as the client sees it, requests/s and output
tokens/s.

`--e2e-trace NAME|PATH` replays `--e2e-requests` requests of a Mooncake trace instead, open loop, once per load in
`--e2e-rates` (requests per second: the trace's own arrival times stretched or squeezed to that mean rate, so its
bursts stay). `--e2e-slice sessions` (the default) takes them whole session by whole session from the entire trace
(bench/traces.py `sample_sessions`, a fixed seed, so every run replays the same requests) and keeps the trace's
reuse; `--e2e-slice head` takes its first requests, which have barely begun to reuse anything. Prompts are built
from the hash ids as `sluicegate bench serve` builds them, each 512-token block `--e2e-block-words` words, so
requests share prefixes exactly as far as their hash ids agree (a prompt is cut at `--e2e-max-prompt-words`); output
lengths are the trace's, scaled by the same factor (at most `--e2e-max-tokens`).
Every (policy, load) run draws its words afresh, so no run finds the previous one's prefixes cached.
`sglang_cache_aware` runs with the replicas' KV events off, so it matches against what it routed, as SGLang's router
does.
"""

from __future__ import annotations

import asyncio
import enum
import json
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.routing_procs import Proc, start_engine, start_gateway
from bench.traces import DEFAULT_TRACES, TRACE_BLOCK_TOKENS, load_mooncake_trace, sample_sessions, trace_prompt

_WORDS = (
    "alpha beta gamma delta value return import class while with open file path list dict tuple token block "
    "cache index count size time state event request response server client stream model engine batch queue"
).split()
_API_KEY = "sk-sg-bench-routing"
_SERVED_NAME = "bench"


class TraceSlice(enum.StrEnum):
    """Which requests of a trace a replay sends."""

    SESSIONS = "sessions"
    """Whole sessions drawn from the entire trace (a fixed seed): about the whole trace's reuse."""
    HEAD = "head"
    """The first requests: conversations that have barely begun (5.5-6.3% reuse in the first 240)."""


@dataclass
class E2eSettings:
    num_replicas: int = 3
    preset: str = "small"
    num_prefixes: int = 12
    prefix_words: int = 300
    suffix_words: int = 30
    num_requests: int = 96
    concurrency: int = 6
    max_tokens: int = 16
    num_kv_blocks: int = 160
    trace: str | None = None
    """A Mooncake trace (a name in bench/traces.py or a path): replayed open loop instead of the shared prefixes."""
    rates: tuple[float, ...] = (1.0, 2.0)
    """Trace replay: the loads, in requests per second (on two cores, 2/s of the conversation trace keeps them busy)."""
    block_words: int = 36
    """Trace replay: words per 512-token hash block, ~44 tokens: prompts at about 1/12 of the trace's lengths, long
    enough that the prefill a cache hit saves, not a request's fixed cost, makes the TTFT (at 12 words the median
    TTFT was 0.05-0.08 s whatever the routing)."""
    max_prompt_words: int = 1800
    """Trace replay: longer prompts are cut (their tail), as `bench serve --max-input-len` does."""
    trace_slice: TraceSlice = TraceSlice.SESSIONS
    slice_seed: int = 0
    """Trace replay: the seed `sample_sessions` draws with; fixed, so every (policy, load) run sends the same requests."""


@dataclass(frozen=True)
class TraceJob:
    offset_s: float
    prompt: str
    max_tokens: int


def _metric_sums(url: str, names: tuple[str, str]) -> tuple[float, float]:
    """Sums over label sets of two counters on a /metrics page."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    sums = [0.0, 0.0]
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names:
                sums[names.index(sample.name)] += sample.value
    return sums[0], sums[1]


_REPLICA_HITS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
_ROUTER_HITS = ("sluicegate_routing_matched_prefix_tokens_total", "sluicegate_routing_prompt_tokens_total")


def _workload(settings: E2eSettings, seed: int) -> list[str]:
    rng = random.Random(seed)
    prefixes = [" ".join(rng.choices(_WORDS, k=settings.prefix_words)) for _ in range(settings.num_prefixes)]
    groups = [i % settings.num_prefixes for i in range(settings.num_requests)]
    rng.shuffle(groups)
    return [prefixes[g] + " " + " ".join(rng.choices(_WORDS, k=settings.suffix_words)) for g in groups]


def _trace_workload(settings: E2eSettings, rate: float, salt: int) -> list[TraceJob]:
    """The trace's requests (`settings.trace_slice`) as prompts of words, their arrivals scaled to `rate` requests per
    second."""
    assert settings.trace is not None
    path = DEFAULT_TRACES.get(settings.trace) or Path(settings.trace)
    if settings.trace_slice is TraceSlice.HEAD:
        rows = load_mooncake_trace(path, limit=settings.num_requests)
    else:
        rows = sample_sessions(load_mooncake_trace(path), settings.num_requests, settings.slice_seed)
    start_s = rows[0].arrival_s
    span_s = max(rows[-1].arrival_s - start_s, 1e-9)
    stretch = (len(rows) - 1) / span_s / rate if len(rows) > 1 else 0.0
    words_per_token = settings.block_words / TRACE_BLOCK_TOKENS

    def block_text(hash_id: int) -> str:  # salted: each run its own words, shared as far as the hash ids agree
        return " ".join(random.Random(hash_id * 1_000_003 + salt).choices(_WORDS, k=settings.block_words))

    blocks: dict[int, str] = {}
    jobs = []
    for row in rows:
        num_words = min(max(1, round(row.prompt_tokens * words_per_token)), settings.max_prompt_words)
        max_tokens = min(max(1, round(row.output_tokens * words_per_token)), settings.max_tokens)
        prompt = trace_prompt(row, num_words, block_text, blocks)
        jobs.append(TraceJob((row.arrival_s - start_s) * stretch, prompt, max_tokens))
    return jobs


async def _one(client: httpx.AsyncClient, url: str, prompt: str, max_tokens: int) -> tuple[float, int]:
    body = {
        "model": _SERVED_NAME,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    ttft_s = None
    output_tokens = 0
    headers = {"authorization": f"Bearer {_API_KEY}"}
    async with client.stream("POST", f"{url}/v1/completions", json=body, headers=headers, timeout=300) as response:
        if response.status_code != 200:
            raise RuntimeError(f"gateway answered {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            if ttft_s is None and '"text"' in line:
                ttft_s = time.perf_counter() - started
            if '"usage"' in line and '"completion_tokens"' in line:
                usage = json.loads(line[6:]).get("usage") or {}
                output_tokens = usage.get("completion_tokens", output_tokens)
    return (ttft_s if ttft_s is not None else time.perf_counter() - started), output_tokens


async def _drive(url: str, prompts: list[str], settings: E2eSettings) -> tuple[list[float], int, float]:
    semaphore = asyncio.Semaphore(settings.concurrency)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=settings.concurrency * 2)) as client:

        async def bounded(prompt: str) -> tuple[float, int]:
            async with semaphore:
                return await _one(client, url, prompt, settings.max_tokens)

        started = time.perf_counter()
        results = await asyncio.gather(*(bounded(p) for p in prompts))
        wall_s = time.perf_counter() - started
    return [r[0] for r in results], sum(r[1] for r in results), wall_s


async def _replay(url: str, jobs: list[TraceJob]) -> tuple[list[float], int, float]:
    """Open loop: each request sent at its offset, whatever is still running."""
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=len(jobs))) as client:
        started = time.perf_counter()

        async def at_offset(job: TraceJob) -> tuple[float, int]:
            await asyncio.sleep(max(0.0, started + job.offset_s - time.perf_counter()))
            return await _one(client, url, job.prompt, job.max_tokens)

        results = await asyncio.gather(*(at_offset(job) for job in jobs))
        wall_s = time.perf_counter() - started
    return [r[0] for r in results], sum(r[1] for r in results), wall_s


def _run_policy(
    policy: str, seed: int, engines: list[Proc], model_dir: str, workdir: Path, settings, rate: float | None = None
) -> dict:
    urls = [e.url for e in engines]
    # SGLang's router has no feed of what replicas cache: it matches against what it routed (the history index).
    kv_events = policy != "sglang_cache_aware"
    gateway = start_gateway(model_dir, _SERVED_NAME, urls, policy, _API_KEY, workdir, kv_events)
    try:
        gateway.wait_healthy()
        time.sleep(1.5)  # the router's first probes and KV-event snapshots
        before = [_metric_sums(u, _REPLICA_HITS) for u in urls]
        if rate is None:
            ttfts, output_tokens, wall_s = asyncio.run(_drive(gateway.url, _workload(settings, seed), settings))
        else:
            jobs = _trace_workload(settings, rate, seed)
            ttfts, output_tokens, wall_s = asyncio.run(_replay(gateway.url, jobs))
        after = [_metric_sums(u, _REPLICA_HITS) for u in urls]
        matched_tokens, prompt_tokens = _metric_sums(gateway.url, _ROUTER_HITS)
    finally:
        gateway.stop()
    hits = sum(a[0] - b[0] for a, b in zip(after, before))
    queries = sum(a[1] - b[1] for a, b in zip(after, before))
    ttfts.sort()
    return {
        "policy": policy,
        "rate": rate,
        "replica_hit_rate": hits / queries if queries else 0.0,
        "router_matched_rate": matched_tokens / prompt_tokens if prompt_tokens else 0.0,
        "ttft_mean_s": statistics.fmean(ttfts),
        "ttft_p50_s": ttfts[len(ttfts) // 2],
        "ttft_p90_s": ttfts[int(0.9 * (len(ttfts) - 1))],
        "ttft_p99_s": ttfts[int(0.99 * (len(ttfts) - 1))],
        "requests_per_s": len(ttfts) / wall_s,
        "output_tokens_per_s": output_tokens / wall_s,
    }


def run_e2e(settings: E2eSettings, policies: list[str]) -> dict:
    from engine.tiny_model import make_tiny_model

    with tempfile.TemporaryDirectory(prefix="sluicegate-bench-routing-") as tmp:
        workdir = Path(tmp)
        model_dir = str(make_tiny_model(workdir / "model", preset=settings.preset, arch="llama"))
        engines = [
            start_engine(model_dir, _SERVED_NAME, settings.num_kv_blocks, workdir, i)
            for i in range(settings.num_replicas)
        ]
        try:
            for engine in engines:
                engine.wait_healthy()
            runs: list[tuple[str, float | None]]
            if settings.trace is None:
                runs = [(p, None) for p in policies]
            else:  # each load in turn, every policy at it
                runs = [(p, rate) for rate in settings.rates for p in policies]
            rows = [
                _run_policy(p, seed, engines, model_dir, workdir, settings, rate) for seed, (p, rate) in enumerate(runs)
            ]
        finally:
            for engine in engines:
                engine.stop()
    return {"settings": vars(settings), "rows": rows}


def print_e2e(result: dict) -> None:
    s = result["settings"]
    replicas = (
        f"gateway + {s['num_replicas']} engine replicas ({s['preset']} preset, {s['num_kv_blocks']} KV blocks each)"
    )
    if s["trace"] is None:
        workload = (
            f"{s['num_requests']} requests over {s['num_prefixes']} shared prefixes of {s['prefix_words']} words, "
            f"concurrency {s['concurrency']}, {s['max_tokens']} output tokens"
        )
    else:
        which = "whole sessions" if s["trace_slice"] == TraceSlice.SESSIONS else "the first requests"
        workload = (
            f"{s['num_requests']} requests of trace {s['trace']} ({which}), {s['block_words']} words per 512-token "
            f"block (at most {s['max_prompt_words']} words a prompt), at most {s['max_tokens']} output tokens, "
            f"open loop at {s['rates']} requests/s"
        )
    print(f"\nEnd to end: {replicas}, {workload}")
    print(
        f"{'policy':<20}{'load':>6}{'replica hit':>12}{'router match':>13}{'ttft mean':>11}{'p50':>8}{'p90':>8}"
        f"{'p99':>8}{'req/s':>8}{'out tok/s':>11}"
    )
    for row in result["rows"]:
        load = "-" if row["rate"] is None else f"{row['rate']:g}"
        print(
            f"{row['policy']:<20}{load:>6}{row['replica_hit_rate']:12.1%}{row['router_matched_rate']:13.1%}"
            f"{row['ttft_mean_s']:10.3f}s{row['ttft_p50_s']:7.3f}s{row['ttft_p90_s']:7.3f}s{row['ttft_p99_s']:7.3f}s"
            f"{row['requests_per_s']:8.2f}{row['output_tokens_per_s']:11.1f}"
        )
