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
thread count it starts with, and keeps the faster (TimedCpuLinear, ~0.1 s once for the small preset; W @ xᵀ only at
a clear margin); past SMALL_BATCH_ROWS the two converge and `F.linear` runs. The choice can differ between a quiet
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
TIMING_BUDGET_S = 0.002
"""Per shape and bucket: the two candidates are called in turn (the fastest call of each counts) until this much
time is spent, after at least 3 calls each."""
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
        with torch.inference_mode():
            for weight in weights:
                shape = (weight.shape[0], weight.shape[1])
                if shape not in self.transposed:
                    self.transposed[shape] = tuple(_transposed_wins(weight, rows) for rows in ROW_BUCKETS)

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.shape[0]
        if 0 < rows <= SMALL_BATCH_ROWS and self.transposed[weight.shape[0], weight.shape[1]][(rows - 1).bit_length()]:
            return cpu_linear(x, weight, bias)
        return F.linear(x, weight, bias)


def _transposed_wins(weight: torch.Tensor, rows: int) -> bool:
    x = torch.randn(rows, weight.shape[1], dtype=weight.dtype, generator=torch.Generator().manual_seed(rows))
    calls = (lambda: F.linear(x, weight), lambda: cpu_linear(x, weight))
    fastest_s = [_call_s(call) for call in calls]  # the first call of a shape pays for oneDNN's and MKL's set-up
    if min(fastest_s) > UNTIMED_CALL_S:
        return False
    spent_s, rounds = 0.0, 0
    while rounds < 3 or spent_s < TIMING_BUDGET_S:
        for i, call in enumerate(calls):
            took_s = _call_s(call)
            fastest_s[i], spent_s = min(fastest_s[i], took_s), spent_s + took_s
        rounds += 1
    return fastest_s[1] <= TRANSPOSED_MAX_TIME_RATIO * fastest_s[0]


def _call_s(call: Callable[[], torch.Tensor]) -> float:
    started = time.perf_counter()
    call()
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
