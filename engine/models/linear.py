"""The model's matmul against a weight matrix, chosen once per device, and on a CPU once per weight shape.

On a CPU, a decode step of a small batch is nothing but [rows, K] x [N, K]ᵀ products, and which way of computing
them is fastest depends on the CPU and its BLAS, by a factor of two to four either way:
- On this project's 2-core AMD box (MKL, 2 threads), torch's `F.linear` (x @ Wᵀ) read the weight at a fraction of
  the memory bandwidth: [4, 384] x [2048, 384]ᵀ took 450 us against 119 us computed as W @ xᵀ, which streams W row
  by row; a single row took a matrix-vector kernel at 339 us, and as two rows (the second a copy) 191 us.
- On its Intel Xeon box (MKL, AVX-512) it is the other way round below 8 rows: the same 2048 x 384 weight takes
  30 us through `F.linear` at one row against 114 us as W @ xᵀ, 67 against 123 us at eight; past 8 rows W @ xᵀ
  wins on the wider products (the LM head, the down projection).
So a CPU model times both on each of its weight shapes at load, for row buckets up to SMALL_BATCH_ROWS, at the
thread count it starts with, and keeps the faster (TimedCpuLinear, ~0.2 s once for the small preset; W @ xᵀ only at
a clear margin); past SMALL_BATCH_ROWS the two converge and `F.linear` runs. It times passes over all the model's
matrices in forward order, as a decode step reads them, not one matrix called again and again: a matrix read back
to back stays in cache, and on a CPU whose cache is smaller than the model (the 2026-12-06 AMD box: 32 MiB of L3, 44
MB of matrices in the small preset) a step reads each one cold. Timed hot, `F.linear` won nearly every bucket there; in a
real step W @ xᵀ took 1.6 ms for all the products of one row against 4.3 ms. The choice can differ between a quiet
machine's two threads and a busy one's one (the down projection at 16-32 rows on the Intel box): it is made for the
quiet case. The choice is fixed for the process, so a row's bits depend on the rows beside it only through its
bucket (and SMALL_BATCH_ROWS). The batch-invariant mode keeps W @ xᵀ on fixed tiles whatever the timing says: two
replicas must compute the same bits. CUDA keeps F.linear (cuBLAS picks its own kernel for the shape).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F

SMALL_BATCH_ROWS = 32
ROW_BUCKETS = (1, 2, 4, 8, 16, 32)
"""A product of `rows` rows takes the choice timed at the smallest bucket of at least `rows`."""
TRANSPOSED_MAX_TIME_RATIO = 0.7
"""W @ xᵀ replaces F.linear only when it took at most this fraction of F.linear's time. Where the two are close the
timing would pick one or the other from run to run, and replicas of one model on one machine would round some
products differently; a clear margin keeps their choices the same (on the two boxes measured the wins were 2-4x)."""
TIMING_BUDGET_S = 0.02
"""Per row bucket: passes over the model's matrices, the two candidates in turn, until this much time is spent,
after at least 3 passes each."""
PASS_BYTES = 1 << 30
"""A timing pass reads the model's matrices up to this many bytes: more than any CPU's last-level cache (the largest
measured here held 480 MiB), so each is read cold as in a step, and an 8B model's pass stays ~1 GiB."""
UNTIMED_CALL_S = 0.02
"""A product slower than this (an 8B model's LM head on a CPU) is not timed: it streams its weight from memory
either way, and timing it would add seconds to the load."""

Linear = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def cpu_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x: [T, K], weight: [N, K] -> [T, N], contiguous: W @ xᵀ up to SMALL_BATCH_ROWS rows, F.linear past them."""
    rows = x.shape[0]
    if rows > SMALL_BATCH_ROWS or rows == 0:
        return F.linear(x, weight, bias)
    if rows == 1:  # two rows take the matrix-matrix kernel; one takes the matrix-vector one, slower where W @ xᵀ wins
        out = torch.mm(weight, x.repeat(2, 1).t())[:, :1]
    else:
        out = torch.mm(weight, x.t())
    out = out.t().contiguous()
    return out if bias is None else out.add_(bias)


class TimedCpuLinear:
    """A CPU model's products: per weight shape and row bucket, whichever of F.linear and W @ xᵀ (cpu_linear) ran
    faster on this machine when the model loaded."""

    def __init__(self, weights: Iterable[torch.Tensor]) -> None:
        self.transposed: dict[tuple[int, int], tuple[bool, ...]] = {}
        """Per weight shape (N, K), per ROW_BUCKETS entry: True where W @ xᵀ won."""
        weights = list(weights)
        with torch.inference_mode():
            per_bucket = [_transposed_wins(weights, rows) for rows in ROW_BUCKETS]
        for shape in dict.fromkeys(_shape(w) for w in weights):
            self.transposed[shape] = tuple(wins.get(shape, False) for wins in per_bucket)

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.shape[0]
        if 0 < rows <= SMALL_BATCH_ROWS and self.transposed[weight.shape[0], weight.shape[1]][(rows - 1).bit_length()]:
            return cpu_linear(x, weight, bias)
        return F.linear(x, weight, bias)


def _shape(weight: torch.Tensor) -> tuple[int, int]:
    return weight.shape[0], weight.shape[1]


def _transposed_wins(weights: list[torch.Tensor], rows: int) -> dict[tuple[int, int], bool]:
    """Per weight shape: whether W @ xᵀ took at most TRANSPOSED_MAX_TIME_RATIO of F.linear's time for `rows` rows,
    summed over the matrices of that shape in a pass (_pass_order; each candidate's fastest pass counts). Shapes
    whose first call took over UNTIMED_CALL_S are left out (False) and out of the passes."""
    if not weights:
        return {}
    gen = torch.Generator().manual_seed(rows)
    inputs = {k: torch.randn(rows, k, dtype=weights[0].dtype, generator=gen) for k in {w.shape[1] for w in weights}}
    candidates = (F.linear, cpu_linear)
    quick_shapes = set()
    for weight in {_shape(w): w for w in weights}.values():  # a shape's first call also pays for oneDNN's set-up
        if min(_call_s(c, inputs[weight.shape[1]], weight) for c in candidates) <= UNTIMED_CALL_S:
            quick_shapes.add(_shape(weight))
    timed = _pass_order([w for w in weights if _shape(w) in quick_shapes])
    fastest_s: list[dict[tuple[int, int], float]] = [{}, {}]  # per candidate, per shape: its fastest pass's seconds
    spent_s, rounds = 0.0, 0
    while timed and (rounds < 3 or spent_s < TIMING_BUDGET_S):
        for candidate, fastest in zip(candidates, fastest_s):
            pass_s: dict[tuple[int, int], float] = {}
            for weight in timed:
                took_s = _call_s(candidate, inputs[weight.shape[1]], weight)
                pass_s[_shape(weight)] = pass_s.get(_shape(weight), 0.0) + took_s
                spent_s += took_s
            for shape, seconds in pass_s.items():
                fastest[shape] = min(fastest.get(shape, seconds), seconds)
        rounds += 1
    linear_s, transposed_s = fastest_s
    return {shape: transposed_s[shape] <= TRANSPOSED_MAX_TIME_RATIO * linear_s[shape] for shape in linear_s}


def _pass_order(weights: list[torch.Tensor]) -> list[torch.Tensor]:
    """The matrices a pass reads: the model's, in forward order, up to PASS_BYTES (then each shape not yet read, once).
    Past the last-level cache a longer pass reads nothing colder; it only makes a large model's load slower."""
    chosen, total_bytes, shapes = [], 0, set()
    for weight in weights:
        if total_bytes < PASS_BYTES or _shape(weight) not in shapes:
            chosen.append(weight)
            total_bytes += weight.numel() * weight.element_size()
            shapes.add(_shape(weight))
    return chosen


def _call_s(product: Linear, x: torch.Tensor, weight: torch.Tensor) -> float:
    started = time.perf_counter()
    product(x, weight, None)
    return time.perf_counter() - started


INVARIANT_TILE_ROWS = 16


def invariant_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """cpu_linear in whole tiles of INVARIANT_TILE_ROWS rows (the last one padded with zeros): a row gets the same bits
    whatever else the step holds.

    Why: CPU BLAS may sum a product's long dimension in another order for another row count. On the project's Intel
    box the 1,024-wide down projection parted past 32 rows at one thread and past 56 at two; on its AMD box (MKL) a
    row's bits changed with the row count even below 32 (24 of 48 row counts and positions tried). A product of one
    shape, [N, K] x [K, 16], gives every row the same bits wherever it sits in the tile and at one thread or two (0
    of 42 on the AMD box). The tiles cost 1.05-1.6x cpu_linear on 48 to 2,048 rows, and a decode step of a few rows
    pays for 16 (docs/benchmarks.md), hence a mode."""
    rows = x.shape[0]
    tiles = -(-rows // INVARIANT_TILE_ROWS)
    padded = x.new_zeros(tiles * INVARIANT_TILE_ROWS, x.shape[1])
    padded[:rows] = x
    out = torch.empty(tiles * INVARIANT_TILE_ROWS, weight.shape[0], dtype=x.dtype, device=x.device)
    for start in range(0, rows, INVARIANT_TILE_ROWS):
        out[start : start + INVARIANT_TILE_ROWS] = cpu_linear(padded[start : start + INVARIANT_TILE_ROWS], weight, bias)
    return out[:rows]


def linear_for(device: torch.device, weights: Iterable[torch.Tensor], batch_invariant: bool = False) -> Linear:
    """`weights`: every matrix the model multiplies by (timed on a CPU unless batch_invariant)."""
    if device.type != "cpu":
        return F.linear
    return invariant_linear if batch_invariant else TimedCpuLinear(weights)
