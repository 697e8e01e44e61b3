"""Batch-invariant paged attention for CPU replicas (the engine's `batch_invariant` mode).

The reference kernels give a query row other bits depending on what shares its step: SDPA takes another path for a
lone decode query than for the same row inside a prefill, and splits long prompts differently for every chunking.
Greedy outputs then agree only until a near-tie that another batch can flip. Here every row's result is a function of
its own query and its own context alone, bit for bit, however the batch, the chunks and the threads fall:

- the context is read in key tiles of KEY_TILE positions (or a block, if larger) on one grid from position 0,
  whatever the chunk; a tile past a row's position would be fully masked and leave its running max, sum and output
  exactly as they were (x * 1.0 + 0), so whether it is computed or skipped changes nothing;
- every product is [key_tile, D] x [D, N] or [D + 1, key_tile] x [key_tile, N], N being a query tile's rows times
  the query heads sharing a KV head, with N a multiple of COLUMN_MULTIPLE (a tile's last row repeated to fill it).
  CPU BLAS computes a column with the kernel its place in the column blocking picks: on the project's Intel box any
  N from 2 up gave a column the same bits, on its AMD box (MKL) only N in multiples of 16 did, wherever the column
  sat and at any batch count (N = 1 takes a matrix-vector kernel that sums otherwise everywhere).
  tests/kernels/test_batch_invariant.py checks this on the machine it runs on;
- the softmax denominator comes out of the same product as the output (a row of ones under V), so no reduction
  whose order depends on the length runs; the maxima are exact in any order.

Query tiles of one width share each product, so decode rows (tiles of up to 2 rows) and prefill chunks (tiles of up
to PREFILL_COLUMNS columns) are attended in separate passes. The mode costs more than the reference (docs/benchmarks.md),
so it is opt-in. Shapes and arguments are kernels/reference.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernels.reference import write_kv_cache

__all__ = ["paged_decode_attention", "paged_prefill_attention", "write_kv_cache"]

KEY_TILE = 64
PREFILL_COLUMNS = 1024
COLUMN_MULTIPLE = 16
# Decode rows (and a draft's verification pair) have a pass of their own: not padded to a prefill's width.
_SHORT_ROWS = 2


@dataclass(frozen=True)
class _QueryTile:
    seq: int
    first_token: int  # its first row's index in the step's flattened batch; the rows are consecutive
    first_position: int  # that row's position in the sequence
    rows: int

    @property
    def last_position(self) -> int:
        return self.first_position + self.rows - 1


def paged_decode_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One query token per sequence (its last position). query: [S, Hq, D] -> [S, Hq, D]."""
    starts = torch.arange(query.shape[0] + 1, dtype=torch.int32, device=query.device)
    return paged_prefill_attention(query, key_cache, value_cache, block_tables, starts, seq_lens, scale)


def paged_prefill_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Causal attention of each sequence's last q_len positions over its cache. query: [T, Hq, D] -> [T, Hq, D]."""
    group = query.shape[1] // key_cache.shape[2]
    prefill_rows = max(_SHORT_ROWS, PREFILL_COLUMNS // group)
    starts, lens = query_start_loc.tolist(), seq_lens.tolist()
    short: list[_QueryTile] = []
    long: list[_QueryTile] = []
    for seq, seq_len in enumerate(lens):
        first, q_len = starts[seq], starts[seq + 1] - starts[seq]
        for offset in range(0, q_len, prefill_rows):
            count = min(prefill_rows, q_len - offset)
            tile = _QueryTile(seq, first + offset, seq_len - q_len + offset, count)
            (short if q_len <= _SHORT_ROWS else long).append(tile)
    out = torch.empty_like(query)
    for tiles in (short, long):
        if tiles:
            _attend(tiles, query, key_cache, value_cache, block_tables, scale, out)
    return out


def _attend(
    tiles: list[_QueryTile],
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
    out: torch.Tensor,
) -> None:
    """Attend the query tiles, each padded to the widest by repeating its last row, and write their rows to `out`."""
    num_q_heads, head_dim = query.shape[1], query.shape[2]
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = num_q_heads // num_kv_heads
    rows_multiple = COLUMN_MULTIPLE // math.gcd(COLUMN_MULTIPLE, group)  # so that width * group is a multiple
    width = -(-max(t.rows for t in tiles) // rows_multiple) * rows_multiple
    # Longest context first: the tiles still reading at a key tile are a prefix, so each pass works on views.
    tiles = sorted(tiles, key=lambda t: -t.last_position)
    device = query.device
    counts = torch.tensor([t.rows for t in tiles], device=device)
    # Row r of a tile, its last row for r past its count (the padding repeats it): [W, R] offsets from its first row.
    offsets = torch.minimum(torch.arange(width, device=device)[None, :], counts[:, None] - 1)
    rows = torch.tensor([t.first_token for t in tiles], device=device)[:, None] + offsets  # [W, R]
    positions = torch.tensor([t.first_position for t in tiles], device=device)[:, None] + offsets
    last_positions = [t.last_position for t in tiles]  # descending
    num_tiles = len(tiles)
    columns = width * group

    # Columns of tile w for KV head h: its rows x the query heads of h, [W, Hkv, D, R * group].
    q = query[rows].view(num_tiles, width, num_kv_heads, group, head_dim)
    q = q.permute(0, 2, 4, 1, 3).reshape(num_tiles, num_kv_heads, head_dim, columns).float()
    column_pos = positions.repeat_interleave(group, dim=1)[:, None, None, :]  # [W, 1, 1, N]
    key_tile = max(KEY_TILE, block_size)  # whole blocks: a key tile is gathered a block at a time
    tables = block_tables[[t.seq for t in tiles]].to(torch.int64)  # [W, M]

    running_max = torch.full((num_tiles, num_kv_heads, 1, columns), float("-inf"), device=device)
    acc = torch.zeros(num_tiles, num_kv_heads, head_dim + 1, columns, device=device)
    # Values with a row of ones under them: one product gives the weighted values and the softmax denominator.
    values_and_ones = torch.ones(num_tiles, num_kv_heads, head_dim + 1, key_tile, device=device)
    active = num_tiles
    for start in range(0, last_positions[0] + 1, key_tile):
        # Tiles whose rows all end before this key tile would see it fully masked: an exact no-op, skipped.
        while last_positions[active - 1] < start:
            active -= 1
        block_cols = torch.arange(start // block_size, (start + key_tile) // block_size, device=device)
        blocks = tables[:active, block_cols.clamp(max=tables.shape[1] - 1)].flatten()  # [A * blocks per tile]
        keys = key_cache.index_select(0, blocks).view(active, key_tile, num_kv_heads, head_dim)
        values = value_cache.index_select(0, blocks).view(active, key_tile, num_kv_heads, head_dim)
        values_and_ones[:active, :, :head_dim] = values.permute(0, 2, 3, 1)
        scores = torch.matmul(keys.permute(0, 2, 1, 3).float(), q[:active]) * scale  # [A, Hkv, key_tile, N]
        key_pos = torch.arange(start, start + key_tile, device=device)
        scores = scores.masked_fill(key_pos[None, None, :, None] > column_pos[:active], float("-inf"))
        tile_max = torch.maximum(running_max[:active], scores.amax(dim=2, keepdim=True))
        product = torch.matmul(values_and_ones[:active], torch.exp(scores - tile_max))
        acc[:active] = acc[:active] * torch.exp(running_max[:active] - tile_max) + product
        running_max[:active] = tile_max
    result = (acc[:, :, :head_dim] / acc[:, :, head_dim:]).to(query.dtype)  # [W, Hkv, D, N]
    result = result.view(num_tiles, num_kv_heads, head_dim, width, group).permute(0, 3, 1, 4, 2)
    # Padding rows repeat a tile's last row: writing them puts the same bits in the same place again.
    out[rows.flatten()] = result.reshape(num_tiles * width, num_q_heads, head_dim)
