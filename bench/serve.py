"""`sluicegate bench serve --url URL [--json]`: a load generator for any OpenAI-compatible server (an engine replica,
the gateway, vLLM, ...).

Arrivals: Poisson at `--request-rate` (req/s; `inf` sends all at once), optionally capped by `--max-concurrency`
(fixed concurrency: `--request-rate inf --max-concurrency C`), or the trace's own timestamps for `--dataset mooncake`.
Datasets (text prompts built from a fixed word list, so any tokenizer works; exact counts come from `usage`):
  random        --input-len words per prompt, --output-len tokens each
  shared-prefix --num-prefixes groups share a --prefix-len-word prefix, then a random --input-len suffix
  mooncake      replay of a Mooncake trace (--trace, shipped in bench/data/workloads/, or --trace-file): each
                512-token hash block becomes a deterministic block of words seeded by its id (shared hash prefixes
                become shared text prefixes), lengths times --scale
Every request streams with `stream_options.include_usage`. Reported: request / input / output throughput, TTFT,
TPOT (per request: (e2e - ttft) / (output_tokens - 1)), ITL (gaps between content chunks) and e2e latency at
p50/p90/p99, and goodput (completed requests per second meeting every --slo-* given).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from dataclasses import dataclass, field

import aiohttp

from bench.traces import DEFAULT_TRACES, TRACE_BLOCK_TOKENS, load_mooncake_trace, trace_prompt
from sluicegate.sse import SseReader

_WORDS = (
    "the data value return self import from class def for while with open file path list dict set tuple int str "
    "none true false name type object module test error result start end line text token block cache key index "
    "count size time state event request response server client stream model engine batch queue step run"
).split()


@dataclass
class BenchRequest:
    prompt: str
    max_tokens: int
    arrival_s: float | None = None  # offset from the start (trace replay); None: from --request-rate


@dataclass
class RequestResult:
    ok: bool
    start_s: float = 0.0
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    error: str = ""

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


# -- datasets -------------------------------------------------------------------------------------------------------


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(count))


def random_dataset(args, rng: random.Random) -> list[BenchRequest]:
    return [BenchRequest(_words(rng, args.input_len), args.output_len) for _ in range(args.num_requests)]


def shared_prefix_dataset(args, rng: random.Random) -> list[BenchRequest]:
    prefixes = [_words(rng, args.prefix_len) for _ in range(args.num_prefixes)]
    return [
        BenchRequest(prefixes[i % args.num_prefixes] + " " + _words(rng, args.input_len), args.output_len)
        for i in range(args.num_requests)
    ]


def mooncake_dataset(args, rng: random.Random) -> list[BenchRequest]:
    path = args.trace_file or DEFAULT_TRACES[args.trace]
    block_words = max(1, round(TRACE_BLOCK_TOKENS * args.scale))
    blocks: dict[int, str] = {}
    requests = []
    for row in load_mooncake_trace(path, limit=args.num_requests):
        num_words = min(max(1, round(row.prompt_tokens * args.scale)), args.max_input_len)
        prompt = trace_prompt(row, num_words, lambda hash_id: _words(random.Random(hash_id), block_words), blocks)
        max_tokens = min(max(1, round(row.output_tokens * args.scale)), args.max_output_len)
        requests.append(BenchRequest(prompt, max_tokens, row.arrival_s))
    if args.request_rate != math.inf:
        for request in requests:
            request.arrival_s = None  # an explicit rate overrides the trace's clock
    else:
        for request in requests:
            request.arrival_s /= args.time_scale
    return requests


DATASETS = {"random": random_dataset, "shared-prefix": shared_prefix_dataset, "mooncake": mooncake_dataset}


# -- load -----------------------------------------------------------------------------------------------------------


def arrival_offsets_s(requests: list[BenchRequest], rate: float, rng: random.Random) -> list[float]:
    trace_offsets_s = [r.arrival_s for r in requests if r.arrival_s is not None]
    if len(trace_offsets_s) == len(requests):
        return trace_offsets_s
    if rate == math.inf:
        return [0.0] * len(requests)
    offsets, t = [], 0.0
    for _ in requests:
        offsets.append(t)
        t += rng.expovariate(rate)
    return offsets


def request_body(args, request: BenchRequest) -> dict:
    body = {
        "model": args.model,
        "max_tokens": request.max_tokens,
        "temperature": args.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": request.prompt}]
    else:
        body["prompt"] = request.prompt
    return body


async def send_one(session: aiohttp.ClientSession, url: str, body: dict, headers: dict) -> RequestResult:
    result = RequestResult(ok=False, start_s=time.perf_counter())
    last_s = None
    try:
        async with session.post(url, json=body, headers=headers) as response:
            if response.status != 200:
                result.error = f"HTTP {response.status}: {(await response.text())[:200]}"
                return result
            reader = SseReader()
            async for raw in response.content.iter_any():
                now_s = time.perf_counter()
                for event in reader.feed(raw):
                    if event.data == "[DONE]":
                        continue
                    chunk = json.loads(event.data)
                    if "error" in chunk:
                        result.error = str(chunk["error"])[:200]
                        return result
                    if _has_content(chunk):
                        if last_s is None:
                            result.ttft_s = now_s - result.start_s
                        else:
                            result.itl_s.append(now_s - last_s)
                        last_s = now_s
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                        result.prompt_tokens = usage.get("prompt_tokens", 0)
                        result.output_tokens = usage.get("completion_tokens", 0)
                        details = usage.get("prompt_tokens_details") or {}
                        result.cached_tokens = details.get("cached_tokens", 0) or 0
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"[:200]
        return result
    result.e2e_s = time.perf_counter() - result.start_s
    result.ok = result.ttft_s is not None
    if not result.ok:
        result.error = "no content in the stream"
    return result


def _has_content(chunk: dict) -> bool:
    for choice in chunk.get("choices") or []:
        if choice.get("text") or (choice.get("delta") or {}).get("content"):
            return True
    return False


async def run_load(args, requests: list[BenchRequest]) -> tuple[list[RequestResult], float]:
    path = "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"
    url = args.url.rstrip("/") + path
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    offsets = arrival_offsets_s(requests, args.request_rate, random.Random(args.seed + 1))
    limit = asyncio.Semaphore(args.max_concurrency or len(requests))
    timeout = aiohttp.ClientTimeout(total=args.timeout_s)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        start_s = time.perf_counter()

        async def one(request: BenchRequest, offset_s: float) -> RequestResult:
            await asyncio.sleep(max(0.0, start_s + offset_s - time.perf_counter()))
            async with limit:
                return await send_one(session, url, request_body(args, request), headers)

        results = await asyncio.gather(*(one(r, o) for r, o in zip(requests, offsets, strict=True)))
        return list(results), time.perf_counter() - start_s


async def resolve_model(args) -> str:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        session.get(args.url.rstrip("/") + "/v1/models", headers=headers) as response,
    ):
        response.raise_for_status()
        return (await response.json())["data"][0]["id"]


# -- report ---------------------------------------------------------------------------------------------------------


def percentiles_ms(values_s: list[float]) -> dict:
    if not values_s:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    ordered = sorted(values_s)

    def pick(q: float) -> float:
        return 1000.0 * ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    return {"mean": 1000.0 * sum(ordered) / len(ordered), "p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99)}


def meets_slos(result: RequestResult, args) -> bool:
    checks = (
        (args.slo_ttft_ms, result.ttft_s),
        (args.slo_tpot_ms, result.tpot_s),
        (args.slo_e2e_ms, result.e2e_s),
    )
    return result.ok and all(slo is None or (v is not None and 1000.0 * v <= slo) for slo, v in checks)


def summarize(args, results: list[RequestResult], duration_s: float) -> dict:
    done = [r for r in results if r.ok]
    prompt_tokens = sum(r.prompt_tokens for r in done)
    output_tokens = sum(r.output_tokens for r in done)
    errors = sorted({r.error for r in results if not r.ok})
    return {
        "url": args.url,
        "endpoint": args.endpoint,
        "dataset": args.dataset,
        "num_requests": len(results),
        "completed": len(done),
        "failed": len(results) - len(done),
        "errors": errors[:5],
        "duration_s": duration_s,
        "request_throughput_rps": len(done) / duration_s,
        "input_throughput_tps": prompt_tokens / duration_s,
        "output_throughput_tps": output_tokens / duration_s,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "cached_prompt_fraction": sum(r.cached_tokens for r in done) / prompt_tokens if prompt_tokens else 0.0,
        "goodput_rps": sum(meets_slos(r, args) for r in results) / duration_s,
        "slo_ms": {"ttft": args.slo_ttft_ms, "tpot": args.slo_tpot_ms, "e2e": args.slo_e2e_ms},
        "ttft_ms": percentiles_ms([r.ttft_s for r in done if r.ttft_s is not None]),
        "tpot_ms": percentiles_ms([r.tpot_s for r in done if r.tpot_s is not None]),
        "itl_ms": percentiles_ms([x for r in done for x in r.itl_s]),
        "e2e_ms": percentiles_ms([r.e2e_s for r in done if r.e2e_s is not None]),
    }


def format_table(summary: dict) -> str:
    lines = [
        f"bench serve: {summary['url']} {summary['endpoint']} dataset={summary['dataset']}",
        f"  requests      {summary['completed']}/{summary['num_requests']} ok in {summary['duration_s']:.2f} s",
        f"  throughput    {summary['request_throughput_rps']:.2f} req/s, "
        f"{summary['input_throughput_tps']:.1f} input tok/s, {summary['output_throughput_tps']:.1f} output tok/s",
        f"  goodput       {summary['goodput_rps']:.2f} req/s under SLOs {summary['slo_ms']}",
        f"  prefix cache  {100 * summary['cached_prompt_fraction']:.1f}% of prompt tokens cached",
        f"  {'(ms)':<12}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}",
    ]
    for name in ("ttft", "tpot", "itl", "e2e"):
        row = summary[f"{name}_ms"]
        keys = ("mean", "p50", "p90", "p99")
        cells = "".join(f"{row[k]:>10.2f}" if row[k] is not None else f"{'-':>10}" for k in keys)
        lines.append(f"  {name.upper():<12}{cells}")
    if summary["errors"]:
        lines.append(f"  errors        {summary['errors']}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluicegate bench serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8100")
    parser.add_argument("--model", help="model name (default: the first of GET /v1/models)")
    parser.add_argument("--api-key", help="sent as a Bearer token (the gateway needs one)")
    parser.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="random")
    parser.add_argument("--num-requests", type=int, default=200)
    parser.add_argument("--request-rate", type=float, default=math.inf, help="Poisson req/s (default inf)")
    parser.add_argument("--max-concurrency", type=int, default=None, help="most requests in flight")
    parser.add_argument("--input-len", type=int, default=128, help="words per prompt (random suffix)")
    parser.add_argument("--output-len", type=int, default=64, help="max_tokens per request")
    parser.add_argument("--prefix-len", type=int, default=256, help="shared-prefix: words in each shared prefix")
    parser.add_argument("--num-prefixes", type=int, default=8)
    parser.add_argument("--trace", choices=sorted(DEFAULT_TRACES), default="conversation", help="mooncake: shipped")
    parser.add_argument("--trace-file", help="mooncake: a .jsonl or .jsonl.gz trace to replay instead of --trace")
    parser.add_argument("--scale", type=float, default=1 / 32, help="mooncake: length multiplier")
    parser.add_argument("--time-scale", type=float, default=1.0, help="mooncake: replay this many times faster")
    parser.add_argument("--max-input-len", type=int, default=2048, help="mooncake: cap on prompt words")
    parser.add_argument("--max-output-len", type=int, default=256, help="mooncake: cap on max_tokens")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--ignore-eos", action="store_true", help="send ignore_eos (vLLM extension)")
    parser.add_argument("--slo-ttft-ms", type=float, default=None)
    parser.add_argument("--slo-tpot-ms", type=float, default=None)
    parser.add_argument("--slo-e2e-ms", type=float, default=None)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.num_requests < 1 or args.request_rate <= 0 or (args.max_concurrency or 1) < 1:
        print("bench serve: --num-requests, --request-rate and --max-concurrency must be positive", file=sys.stderr)
        return 2
    requests = DATASETS[args.dataset](args, random.Random(args.seed))
    if args.model is None:
        args.model = asyncio.run(resolve_model(args))
    results, duration_s = asyncio.run(run_load(args, requests))
    summary = summarize(args, results, duration_s)
    print(json.dumps(summary) if args.json else format_table(summary))
    return 0 if summary["completed"] else 1


if __name__ == "__main__":
    sys.exit(main())
