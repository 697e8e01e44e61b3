"""Section 2: kernel timings against the card's measured device-to-device copy bandwidth.

Decode attention is memory-bound: its floor is reading every context token's K and V once, so achieved GB/s over the
measured copy bandwidth is how close it is to the hardware (goal: >= 80% at long contexts). Prefill attention is
compute-bound and reported in TFLOP/s.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bench.gpu.report import Report, Row
from kernels import reference
from kernels.paged_cases import decode_args, make_paged_case, prefill_args

DECODE_BANDWIDTH_GOAL = 0.80


@dataclass(frozen=True)
class TimingProfile:
    copy_bytes: int
    num_kv_heads: int
    queries_per_kv: int
    head_dim: int
    decode: tuple[tuple[int, int], ...]  # (batch, context) pairs
    long_context: int  # decode rows at or above this context are held to the bandwidth goal
    reference_decode: tuple[int, int]  # one (batch, context) also timed with the torch reference
    prefill: tuple[tuple[int, int, int], ...]  # (sequences, prefix, chunk)
    tokens: int
    hidden: int
    repeats: int


GPU = TimingProfile(
    copy_bytes=4 << 30,
    num_kv_heads=8,
    queries_per_kv=4,
    head_dim=128,
    decode=((1, 32768), (4, 131072), (8, 32768), (32, 16384), (64, 8192), (256, 2048), (256, 512)),
    long_context=8192,
    reference_decode=(8, 32768),
    prefill=((1, 0, 4096), (1, 8192, 2048), (8, 1024, 512)),
    tokens=8192,
    hidden=4096,
    repeats=20,
)
CPU_SMOKE = TimingProfile(
    copy_bytes=16 << 20,
    num_kv_heads=1,
    queries_per_kv=4,
    head_dim=32,
    decode=((2, 300),),
    long_context=256,
    reference_decode=(2, 300),
    prefill=((1, 16, 20),),
    tokens=4,
    hidden=64,
    repeats=1,
)


def time_ms(fn, device: str, repeats: int) -> float:
    """Median milliseconds per call after a warm-up call (which also compiles)."""
    fn()
    if device != "cuda":
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e3)
        return statistics.median(samples)
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start_event.record()
        fn()
        end_event.record()
        end_event.synchronize()
        samples.append(start_event.elapsed_time(end_event))
    return statistics.median(samples)


def measure_copy_gbps(report: Report, p: TimingProfile, device: str) -> float:
    src = torch.empty(p.copy_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), device, max(p.repeats, 5))
    gbps = 2 * p.copy_bytes / ms / 1e6  # a copy reads and writes every byte
    report.add(
        Row("timing", f"device copy {p.copy_bytes >> 20} MiB (read+write)", gbps, "GB/s", "measured peak", "INFO")
    )
    return gbps


def run_timings(report: Report, ops, p: TimingProfile, device: str, stop_at: float) -> float:
    """Measures the copy bandwidth first (the yardstick), then one row per timing; past `stop_at`
    (time.monotonic()) the rest are listed as skipped. Returns the measured copy bandwidth in GB/s (0 if failed)."""
    peak_gbps = 0.0
    try:
        peak_gbps = measure_copy_gbps(report, p, device)
    except Exception as error:
        report.fail("timing", "device copy bandwidth", error)
    yardstick = peak_gbps or float("nan")
    pending: list[tuple[str, Callable[[], object]]] = [
        (f"decode b={b} ctx={c}", functools.partial(_decode, report, ops, p, device, yardstick, b, c))
        for b, c in p.decode
    ]
    pending.append(("decode torch reference", lambda: _decode_reference(report, p, device, yardstick)))
    pending += [
        (f"prefill s={s} prefix={pre} chunk={c}", functools.partial(_prefill, report, ops, p, device, s, pre, c))
        for s, pre, c in p.prefill
    ]
    pending += [
        ("write_kv_cache", lambda: _write_kv(report, ops, p, device, yardstick)),
        ("add_rms_norm", lambda: _norm(report, ops, p, device, yardstick)),
        ("rotary", lambda: _rotary(report, ops, p, device, yardstick)),
    ]
    for i, (item, fn) in enumerate(pending):
        if time.monotonic() > stop_at:
            report.add(Row("timing", f"{len(pending) - i} timings not run", "out of time", status="SKIP"))
            break
        _guard(report, item, fn)
    return peak_gbps


def _guard(report: Report, item: str, fn) -> None:
    try:
        fn()
    except Exception as error:
        report.fail("timing", item, error)
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _decode_case(p: TimingProfile, device: str, batch: int, context: int):
    return make_paged_case(
        [context] * batch,
        [1] * batch,
        p.num_kv_heads,
        p.queries_per_kv,
        p.head_dim,
        16,
        torch.bfloat16 if device == "cuda" else torch.float32,
        device,
        spare_blocks=0,
    )


def _decode_bytes(case) -> int:
    kv = 2 * int(case.seq_lens.sum()) * case.key_cache[0, 0].numel() * case.key_cache.element_size()
    return kv + 2 * case.query.numel() * case.query.element_size() + case.block_tables.numel() * 4


def _decode(report: Report, ops, p: TimingProfile, device: str, peak_gbps: float, batch: int, context: int) -> None:
    case = _decode_case(p, device, batch, context)
    ms = time_ms(lambda: ops.paged_decode_attention(*decode_args(case)), device, p.repeats)
    gbps = _decode_bytes(case) / ms / 1e6
    fraction = gbps / peak_gbps
    held_to_goal = device == "cuda" and context >= p.long_context
    status = ("PASS" if fraction >= DECODE_BANDWIDTH_GOAL else "MISS") if held_to_goal else "INFO"
    report.add(
        Row(
            "timing",
            f"decode attn b={batch} ctx={context} ({ms * 1e3:.0f} us)",
            gbps,
            "GB/s",
            f"{fraction:.0%} of peak (goal 80%)",
            status,
        )
    )


def _decode_reference(report: Report, p: TimingProfile, device: str, peak_gbps: float) -> None:
    batch, context = p.reference_decode
    case = _decode_case(p, device, batch, context)
    ms = time_ms(lambda: reference.paged_decode_attention(*decode_args(case)), device, max(3, p.repeats // 4))
    gbps = _decode_bytes(case) / ms / 1e6
    report.add(
        Row(
            "timing",
            f"decode attn TORCH REFERENCE b={batch} ctx={context} ({ms * 1e3:.0f} us)",
            gbps,
            "GB/s",
            f"{gbps / peak_gbps:.0%} of peak",
            "INFO",
        )
    )


def _prefill(report: Report, ops, p: TimingProfile, device: str, seqs: int, prefix: int, chunk: int) -> None:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    case = make_paged_case(
        [prefix + chunk] * seqs,
        [chunk] * seqs,
        p.num_kv_heads,
        p.queries_per_kv,
        p.head_dim,
        16,
        dtype,
        device,
        spare_blocks=0,
    )
    ms = time_ms(lambda: ops.paged_prefill_attention(*prefill_args(case)), device, p.repeats)
    visible = seqs * (chunk * prefix + chunk * (chunk + 1) // 2)  # keys each query attends to, summed
    flops = 4 * visible * p.num_kv_heads * p.queries_per_kv * p.head_dim  # QK^T and PV, 2 flops per MAC
    report.add(
        Row(
            "timing",
            f"prefill attn s={seqs} prefix={prefix} chunk={chunk} ({ms:.2f} ms)",
            flops / ms / 1e9,
            "TFLOP/s",
            "",
            "INFO",
        )
    )


def _write_kv(report: Report, ops, p: TimingProfile, device: str, peak_gbps: float) -> None:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    shape = (p.tokens, p.num_kv_heads, p.head_dim)
    key, value = torch.randn(shape, device=device).to(dtype), torch.randn(shape, device=device).to(dtype)
    num_blocks = 2 * p.tokens // 16 + 1  # room for every token, slots drawn at random
    key_cache = torch.empty(num_blocks, 16, p.num_kv_heads, p.head_dim, dtype=dtype, device=device)
    value_cache = torch.empty_like(key_cache)
    slots = torch.randperm(num_blocks * 16, device=device)[: p.tokens]
    ms = time_ms(lambda: ops.write_kv_cache(key, value, key_cache, value_cache, slots), device, p.repeats)
    _bandwidth_row(report, f"write_kv_cache T={p.tokens}", 4 * key.numel() * key.element_size(), ms, peak_gbps)


def _norm(report: Report, ops, p: TimingProfile, device: str, peak_gbps: float) -> None:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    x = torch.randn(p.tokens, p.hidden, device=device).to(dtype)
    residual, weight = torch.randn_like(x), torch.ones(p.hidden, device=device, dtype=dtype)
    ms = time_ms(lambda: ops.add_rms_norm(x, residual, weight, 1e-5), device, p.repeats)
    _bandwidth_row(report, f"add_rms_norm T={p.tokens} H={p.hidden}", 4 * x.numel() * x.element_size(), ms, peak_gbps)


def _rotary(report: Report, ops, p: TimingProfile, device: str, peak_gbps: float) -> None:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    num_q = p.num_kv_heads * p.queries_per_kv
    query = torch.randn(p.tokens, num_q, p.head_dim, device=device).to(dtype)
    key = torch.randn(p.tokens, p.num_kv_heads, p.head_dim, device=device).to(dtype)
    cos = torch.rand(8192, p.head_dim, device=device).to(dtype)
    positions = torch.randint(0, 8192, (p.tokens,), device=device)
    ms = time_ms(lambda: ops.apply_rotary(query, key, positions, cos, cos), device, p.repeats)
    moved = 2 * (query.numel() + key.numel()) * query.element_size()
    _bandwidth_row(report, f"rotary T={p.tokens} {num_q}q/{p.num_kv_heads}kv", moved, ms, peak_gbps)


def _bandwidth_row(report: Report, item: str, moved_bytes: int, ms: float, peak_gbps: float) -> None:
    gbps = moved_bytes / ms / 1e6
    report.add(Row("timing", f"{item} ({ms * 1e3:.0f} us)", gbps, "GB/s", f"{gbps / peak_gbps:.0%} of peak", "INFO"))
