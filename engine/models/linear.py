"""The model's matmul against a weight matrix, chosen once per device.

On a CPU, a decode step of a small batch is nothing but [rows, K] x [N, K]ᵀ products, and torch's `F.linear` reads
the weight for them at a fraction of the memory bandwidth: on this project's 2-core AMD box (2 threads),
[4, 384] x [2048, 384]ᵀ took 450 us as F.linear against 119 us computed as W @ xᵀ, which streams W row by row; a
single row goes through a matrix-vector kernel at 339 us, and as two rows (the second a copy) at 191 us. Up to
SMALL_BATCH_ROWS rows CPU replicas compute the products that way; past it the two converge (at 48 to 128 rows the
transposing copy cost more than it saved). Whole decode steps: docs/benchmarks.md, "Engine step profile". CUDA
keeps F.linear (cuBLAS picks its own kernel for the shape).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

SMALL_BATCH_ROWS = 32

Linear = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def cpu_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x: [T, K], weight: [N, K] -> [T, N], contiguous."""
    rows = x.shape[0]
    if rows > SMALL_BATCH_ROWS or rows == 0:
        return F.linear(x, weight, bias)
    if rows == 1:  # two rows take the matrix-matrix kernel; one takes the slower matrix-vector one
        out = torch.mm(weight, x.repeat(2, 1).t())[:, :1]
    else:
        out = torch.mm(weight, x.t())
    out = out.t().contiguous()
    return out if bias is None else out.add_(bias)


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


def linear_for(device: torch.device, batch_invariant: bool = False) -> Linear:
    if device.type != "cpu":
        return F.linear
    return invariant_linear if batch_invariant else cpu_linear
