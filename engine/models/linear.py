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


def invariant_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """cpu_linear in tiles of SMALL_BATCH_ROWS rows: a row gets the same bits whatever else the step holds.

    Why: CPU BLAS may sum a product's long dimension in another order once a call has more rows (on the project's
    Intel box the 1,024-wide down projection parts past 32 rows at one thread and past 56 at two), so a row's result
    depended on its neighbours. Up to SMALL_BATCH_ROWS rows, W @ xᵀ sums each column the same way at any row count
    and thread count. Costs 1.05-1.6x cpu_linear on 48 to 2,048 rows (docs/benchmarks.md), hence a mode."""
    rows = x.shape[0]
    if rows <= SMALL_BATCH_ROWS:
        return cpu_linear(x, weight, bias)
    out = torch.empty(rows, weight.shape[0], dtype=x.dtype, device=x.device)
    for start in range(0, rows, SMALL_BATCH_ROWS):
        out[start : start + SMALL_BATCH_ROWS] = cpu_linear(x[start : start + SMALL_BATCH_ROWS], weight, bias)
    return out


def linear_for(device: torch.device, batch_invariant: bool = False) -> Linear:
    if device.type != "cpu":
        return F.linear
    return invariant_linear if batch_invariant else cpu_linear
