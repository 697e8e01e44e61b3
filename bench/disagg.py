"""`sluicegate bench disagg`: one prefill and one decode replica against two co-located replicas, same cores.

A mixed workload: chat requests (short prompts, long answers) arrive steadily while long prompts (a few output
tokens) arrive every `--long-every-s`. On co-located replicas a long prompt's prefill runs in the same steps as the
chats' decodes and stretches their inter-token latency; split, the prefill replica takes every prompt and the decode
replica only computes short prompts and a long prompt's last partial block. Each replica is pinned to its own core.
The client does what the gateway does (docs/architecture.md, "Disaggregated prefill and decode"): a prompt of
`--prefill-min-prompt-tokens` or more is prefilled with max_tokens 1 and then sent to the decode replica with the
returned kv_transfer_params, a shorter one goes to the decode replica alone; co-located requests go to the replica
with fewer in flight. Greedy decoding with ignore_eos, so both setups must produce the same text for every request.

Also measured: the decode replica's KV reads (vllm:nixl_* metrics): time and bytes per block, set against this
machine's memory bandwidth (a numpy copy).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import numpy as np

from bench.routing_procs import Proc, free_port
from bench.serve import percentiles_ms

DEFAULT_MODEL_DIR = Path(".sluicegate/models/small")
KV_TRANSFER = "kv_transfer_params"


@dataclass(frozen=True)
class Job:
    kind: str  # "chat" | "long"
    arrival_s: float
    prompt: list[int]
    max_tokens: int


@dataclass
class Result:
    job: Job
    ttft_s: float = 0.0
    gaps_s: list[float] = field(default_factory=list)  # between consecutive streamed tokens
    text: str = ""
    error: str = ""


def make_workload(args: argparse.Namespace, vocab: int) -> list[Job]:
    rng = random.Random(args.seed)
    jobs, t = [], 0.0
    while t < args.duration_s:
        prompt = [rng.randrange(3, vocab) for _ in range(args.chat_prompt_tokens)]
        jobs.append(Job("chat", t, prompt, args.chat_output_tokens))
        t += rng.expovariate(args.chat_rate)
    t = args.long_every_s / 2
    while t < args.duration_s:
        prompt = [rng.randrange(3, vocab) for _ in range(args.long_prompt_tokens)]
        jobs.append(Job("long", t, prompt, args.long_output_tokens))
        t += args.long_every_s
    return sorted(jobs, key=lambda job: job.arrival_s)


class Replica(Proc):
    """`sluicegate engine` pinned to one core, with the requests this client has in flight on it."""

    def __init__(
        self,
        model: str,
        core: int | None,
        role: str,
        log_dir: Path,
        num_kv_blocks: int,
        step_tokens: int,
        batch_invariant: bool,
    ) -> None:
        port = free_port()
        args = ["engine", "--model", model, "--port", str(port), "--served-model-name", "m", "--cpu-threads", "1"]
        args += ["--num-kv-blocks", str(num_kv_blocks), "--kv-role", role, "--log-level", "warning", "--no-request-log"]
        args += ["--max-num-batched-tokens", str(step_tokens)]
        args += ["--batch-invariant"] if batch_invariant else []
        super().__init__(args, port, log_dir / f"{role}-{port}.log", core, {**os.environ, "OMP_NUM_THREADS": "1"})
        self.in_flight = 0

    def metrics(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for line in httpx.get(self.url + "/metrics", timeout=10).text.splitlines():
            if line and not line.startswith("#") and "{" in line:
                name = line.split("{", 1)[0]
                values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        return values


async def _stream(http: httpx.AsyncClient, url: str, body: dict, result: Result, sent_s: float) -> None:
    last_s = None
    async with http.stream("POST", url + "/v1/completions", json=body) as response:
        if response.status_code != 200:
            result.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
            return
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                result.error = str(chunk["error"])
                return
            text = "".join(choice.get("text", "") for choice in chunk.get("choices", []))
            if not text:
                continue
            now_s = time.monotonic()
            if last_s is None:
                result.ttft_s = now_s - sent_s
            else:
                result.gaps_s.append(now_s - last_s)
            last_s = now_s
            result.text += text


async def _colocated(http: httpx.AsyncClient, replicas: list[Replica], job: Job, body: dict) -> Result:
    replica = min(replicas, key=lambda r: r.in_flight)  # least outstanding requests, as a gateway's router would
    replica.in_flight += 1
    result = Result(job)
    try:
        await _stream(http, replica.url, body, result, time.monotonic())
    finally:
        replica.in_flight -= 1
    return result


async def _disaggregated(
    http: httpx.AsyncClient, prefill: Replica, decode: Replica, job: Job, body: dict, min_prompt_tokens: int
) -> Result:
    result = Result(job)
    sent_s = time.monotonic()
    if len(job.prompt) < min_prompt_tokens:  # the gateway's prefill_min_prompt_tokens
        await _stream(http, decode.url, body, result, sent_s)
        return result
    hop = {**body, "stream": False, "max_tokens": 1, KV_TRANSFER: {"do_remote_decode": True}}
    hop.pop("stream_options", None)
    answer = await http.post(prefill.url + "/v1/completions", json=hop)
    params = answer.json().get(KV_TRANSFER) if answer.status_code == 200 else None
    if params is None:
        result.error = f"prefill hop: HTTP {answer.status_code}"
    await _stream(http, decode.url, {**body, KV_TRANSFER: params} if params else body, result, sent_s)
    return result


async def run_workload(jobs: list[Job], send) -> list[Result]:
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=256)) as http:
        start_s = time.monotonic()

        async def one(job: Job) -> Result:
            await asyncio.sleep(max(0.0, start_s + job.arrival_s - time.monotonic()))
            body = {"model": "m", "prompt": job.prompt, "max_tokens": job.max_tokens, "temperature": 0}
            body |= {"ignore_eos": True, "stream": True}
            return await send(http, job, body)

        return list(await asyncio.gather(*(one(job) for job in jobs)))


STALL_GAP_FACTOR = 4  # a chat's gap is "stalled" (a prefill ran in its step) past 4x its setup's ITL p50


def summarize(name: str, results: list[Result]) -> dict:
    chats = [r for r in results if r.job.kind == "chat"]
    gaps_s = [gap for r in chats for gap in r.gaps_s]
    itl_ms = percentiles_ms(gaps_s)
    stall_s = STALL_GAP_FACTOR * itl_ms["p50"] / 1e3 if gaps_s else 0.0
    return {
        "setup": name,
        "errors": sum(1 for r in results if r.error),
        "ttft_ms": percentiles_ms([r.ttft_s for r in results if not r.error]),
        "chat_ttft_ms": percentiles_ms([r.ttft_s for r in chats if not r.error]),
        "long_ttft_ms": percentiles_ms([r.ttft_s for r in results if r.job.kind == "long" and not r.error]),
        "chat_itl_ms": itl_ms,
        # Per-token ITL p99 sees prefill stalls only when they are more than 1% of the gaps: say how many there are.
        "chat_stalled_gap_share": sum(1 for gap in gaps_s if gap > stall_s) / len(gaps_s) if gaps_s else None,
        # Per request: the mean gap (TPOT) and the longest one (a prefill that stalled it), over the chats.
        "chat_tpot_ms": percentiles_ms([sum(r.gaps_s) / len(r.gaps_s) for r in chats if r.gaps_s]),
        "chat_max_gap_ms": percentiles_ms([max(r.gaps_s) for r in chats if r.gaps_s]),
    }


def memory_bandwidth_gb_s() -> float:
    """A 256 MiB copy, best of five: read + write bytes per second."""
    src = np.ones(256 << 18, dtype=np.float32)
    dst = np.empty_like(src)
    best_s = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        np.copyto(dst, src)
        best_s = min(best_s, time.perf_counter() - started)
    return 2 * src.nbytes / best_s / 1e9


def transfer_cost(metrics: dict[str, float]) -> dict:
    blocks = metrics.get("sluicegate_engine_kv_blocks_read_total", 0.0)
    reads = metrics.get("vllm:nixl_xfer_time_seconds_count", 0.0)
    seconds = metrics.get("vllm:nixl_xfer_time_seconds_sum", 0.0)
    num_bytes = metrics.get("vllm:nixl_bytes_transferred_sum", 0.0)
    return {
        "reads": reads,
        "blocks": blocks,
        "bytes_per_block": num_bytes / blocks if blocks else None,
        "us_per_block": 1e6 * seconds / blocks if blocks else None,
        "us_per_read": 1e6 * seconds / reads if reads else None,
        "read_gb_s": num_bytes / seconds / 1e9 if seconds else None,
        "fallbacks": metrics.get("sluicegate_engine_kv_pull_fallbacks_total", 0.0),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sluicegate bench disagg", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model folder (default: the small preset, made if missing)")
    parser.add_argument("--duration-s", type=float, default=30.0, help="arrivals span this long")
    parser.add_argument("--chat-rate", type=float, default=4.0, help="chat arrivals per second (Poisson)")
    parser.add_argument("--chat-prompt-tokens", type=int, default=48)
    parser.add_argument("--chat-output-tokens", type=int, default=128)
    # A long prompt every 1 s stalls about 2% of co-located chat gaps with 512-token steps, twice what a per-token
    # p99 can see at all; every 1.5 s it was 0.8-1.4% once decode steps got faster, where the p99 lands on a stall
    # in some runs and on an ordinary step in others. A single CPU prefill replica keeps up at 1 s (about 40% busy);
    # at 0.75 s its queue grows (docs/benchmarks.md).
    parser.add_argument("--long-every-s", type=float, default=1.0)
    parser.add_argument("--long-prompt-tokens", type=int, default=1536)
    parser.add_argument("--long-output-tokens", type=int, default=4)
    parser.add_argument("--num-kv-blocks", type=int, default=2048)
    parser.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=512,
        help="every replica's token budget per step, so a long prompt's prefill chunk size (the engine's default is "
        "2048: on a CPU core that is one ~1 s step per long prompt, a stall of well under 1%% of gaps)",
    )
    parser.add_argument(
        "--prefill-min-prompt-tokens", type=int, default=256, help="shorter prompts skip the prefill replica"
    )
    parser.add_argument(
        "--batch-invariant",
        action="store_true",
        help="every replica with --batch-invariant: outputs identical by construction, at that mode's cost",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-pin", action="store_true", help="do not pin each replica to its own core")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.model is None:
        args.model = str(DEFAULT_MODEL_DIR)
        if not (DEFAULT_MODEL_DIR / "config.json").exists():
            from engine.tiny_model import make_tiny_model

            make_tiny_model(DEFAULT_MODEL_DIR, preset="small")
    vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"]
    jobs = make_workload(args, vocab)
    cores = sorted(os.sched_getaffinity(0))
    pins = [None, None] if args.no_pin or len(cores) < 2 else cores[:2]
    log_dir = Path(tempfile.mkdtemp(prefix="bench-disagg-"))

    def start(roles: list[str]) -> list[Replica]:
        replicas = [
            Replica(
                args.model, pin, role, log_dir, args.num_kv_blocks, args.max_num_batched_tokens, args.batch_invariant
            )
            for pin, role in zip(pins, roles)
        ]
        for replica in replicas:
            replica.wait_healthy()
        return replicas

    colocated = start(["both", "both"])
    try:
        together = asyncio.run(run_workload(jobs, lambda http, job, body: _colocated(http, colocated, job, body)))
    finally:
        for replica in colocated:
            replica.stop()
    prefill, decode = start(["prefill", "decode"])
    try:
        threshold = args.prefill_min_prompt_tokens
        split = asyncio.run(
            run_workload(jobs, lambda http, job, body: _disaggregated(http, prefill, decode, job, body, threshold))
        )
        cost = transfer_cost(decode.metrics())
    finally:
        prefill.stop()
        decode.stop()

    rows = [summarize("2 co-located", together), summarize("1 prefill + 1 decode", split)]
    identical = sum(1 for a, b in zip(together, split) if a.text == b.text and not a.error and not b.error)
    differing = [_difference(i, a, b) for i, (a, b) in enumerate(zip(together, split)) if a.text != b.text]
    report = {
        "workload": {k: v for k, v in vars(args).items() if k not in ("json",)} | {"requests": len(jobs)},
        "pinned_cores": pins,
        "rows": rows,
        "identical_outputs": identical,
        "differing_outputs": differing,
        "transfer": cost | {"memory_copy_gb_s": memory_bandwidth_gb_s()},
        "ratios": {
            "chat_itl_p99": _ratio(rows[1]["chat_itl_ms"]["p99"], rows[0]["chat_itl_ms"]["p99"]),
            "chat_tpot_p99": _ratio(rows[1]["chat_tpot_ms"]["p99"], rows[0]["chat_tpot_ms"]["p99"]),
            "chat_max_gap_p50": _ratio(rows[1]["chat_max_gap_ms"]["p50"], rows[0]["chat_max_gap_ms"]["p50"]),
            "ttft_p50": _ratio(rows[1]["ttft_ms"]["p50"], rows[0]["ttft_ms"]["p50"]),
        },
        "logs": str(log_dir),
    }
    if args.json:
        print(json.dumps(report, indent=2, default=lambda o: asdict(o)))
        return 0
    _print(report, len(jobs))
    return 0


def _difference(index: int, together: Result, split: Result) -> dict:
    """Where the two setups' texts of one request part, and what kind of request it was."""
    first = next((i for i, (a, b) in enumerate(zip(together.text, split.text)) if a != b), None)
    if first is None:
        first = min(len(together.text), len(split.text))
    return {
        "request": index,
        "kind": together.job.kind,
        "first_differing_char": first,
        "chars": [len(together.text), len(split.text)],
        "errors": [together.error, split.error],
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _print(report: dict, num_jobs: int) -> None:
    print(f"{num_jobs} requests; replicas pinned to cores {report['pinned_cores']}; logs in {report['logs']}")
    print(
        "| setup | errors | TTFT p50 ms | TTFT p99 ms | chat TTFT p50 | long TTFT p50 | chat ITL p50 ms | "
        "chat ITL p99 ms | chat TPOT p99 ms | chat longest gap p50 ms | chat gaps stalled |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in report["rows"]:
        t, c, lng, itl = row["ttft_ms"], row["chat_ttft_ms"], row["long_ttft_ms"], row["chat_itl_ms"]
        print(
            f"| {row['setup']} | {row['errors']} | {t['p50']:.1f} | {t['p99']:.1f} | {c['p50']:.1f} | "
            f"{lng['p50']:.1f} | {itl['p50']:.1f} | {itl['p99']:.1f} | {row['chat_tpot_ms']['p99']:.1f} | "
            f"{row['chat_max_gap_ms']['p50']:.1f} | {100 * (row['chat_stalled_gap_share'] or 0):.2f}% |"
        )
    ratios, cost = report["ratios"], report["transfer"]
    print(
        f"split / co-located: chat ITL p99 {ratios['chat_itl_p99']:.2f}x, chat TPOT p99 {ratios['chat_tpot_p99']:.2f}x,"
        f" chat longest gap p50 {ratios['chat_max_gap_p50']:.2f}x, TTFT p50 {ratios['ttft_p50']:.2f}x"
    )
    print(f"identical outputs: {report['identical_outputs']} of {num_jobs}")
    for diff in report["differing_outputs"]:
        print(
            f"  request {diff['request']} ({diff['kind']}): texts part at character {diff['first_differing_char']} "
            f"of {diff['chars'][0]} / {diff['chars'][1]}; errors {diff['errors']}"
        )
    if cost["blocks"]:
        print(
            f"KV reads: {cost['reads']:.0f} reads, {cost['blocks']:.0f} blocks of {cost['bytes_per_block']:.0f} B, "
            f"{cost['us_per_block']:.1f} us per block, {cost['us_per_read']:.0f} us per read, "
            f"{cost['read_gb_s']:.2f} GB/s; memory copy {cost['memory_copy_gb_s']:.1f} GB/s; "
            f"fallbacks {cost['fallbacks']:.0f}"
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
