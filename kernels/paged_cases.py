"""Random paged-attention inputs for checking kernels against the references (the kernel tests and the GPU
benchmark share it). Block ids are a shuffled range starting at `first_block_id`, so a case can place its blocks
past 2**31 cache elements without touching the blocks below: the cache is allocated with torch.empty (untouched
pages cost no memory) and only the blocks in use are filled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class PagedCase:
    query: torch.Tensor  # [T, Hq, D]
    key_cache: torch.Tensor  # [N, B, Hkv, D]
    value_cache: torch.Tensor  # [N, B, Hkv, D]
    block_tables: torch.Tensor  # [S, M] int32
    seq_lens: torch.Tensor  # [S] int32, context including the new tokens
    query_start_loc: torch.Tensor  # [S + 1] int32
    used_block_ids: torch.Tensor  # [U] int64, the blocks the tables point at
    scale: float


def make_paged_case(
    seq_lens: list[int],
    query_lens: list[int],
    num_kv_heads: int,
    queries_per_kv: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    device: str | torch.device = "cpu",
    first_block_id: int = 0,
    spare_blocks: int = 3,
    extra_table_columns: int = 1,
    seed: int = 0,
) -> PagedCase:
    """Sequence s has seq_lens[s] tokens of context, its last query_lens[s] of them queries. Block tables get
    `extra_table_columns` padding columns (any valid id, as the contract allows) and the cache `spare_blocks`
    unused random blocks, so reading past a table's end or a wrong block shows up as a wrong answer."""
    if len(seq_lens) != len(query_lens) or any(q > s for q, s in zip(query_lens, seq_lens)):
        raise ValueError(f"query_lens {query_lens} must pair with and not exceed seq_lens {seq_lens}")
    gen = torch.Generator(device=device).manual_seed(seed)
    blocks_per_seq = [math.ceil(n / block_size) for n in seq_lens]
    num_used = sum(blocks_per_seq)
    num_blocks = first_block_id + num_used + spare_blocks
    ids = first_block_id + torch.randperm(num_used + spare_blocks, generator=gen, device=device)
    table_width = max(blocks_per_seq) + extra_table_columns
    block_tables = torch.full((len(seq_lens), table_width), first_block_id, dtype=torch.int32, device=device)
    taken = 0
    for s, n in enumerate(blocks_per_seq):
        block_tables[s, :n] = ids[taken : taken + n].to(torch.int32)
        taken += n
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.empty(shape, dtype=dtype, device=device)
    value_cache = torch.empty(shape, dtype=dtype, device=device)
    filled = ids.to(torch.int64)  # used and spare blocks; everything below first_block_id stays untouched
    key_cache[filled] = _randn((len(filled), *shape[1:]), gen, device).to(dtype)
    value_cache[filled] = _randn((len(filled), *shape[1:]), gen, device).to(dtype)
    num_tokens = sum(query_lens)
    query = _randn((num_tokens, num_kv_heads * queries_per_kv, head_dim), gen, device).to(dtype)
    starts = [0]
    for q in query_lens:
        starts.append(starts[-1] + q)
    return PagedCase(
        query=query,
        key_cache=key_cache,
        value_cache=value_cache,
        block_tables=block_tables,
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        query_start_loc=torch.tensor(starts, dtype=torch.int32, device=device),
        used_block_ids=ids[:num_used].to(torch.int64),
        scale=head_dim**-0.5,
    )


def _randn(shape: tuple[int, ...], gen: torch.Generator, device) -> torch.Tensor:
    return torch.randn(shape, generator=gen, device=device)


def decode_args(case: PagedCase) -> tuple:
    """Arguments of paged_decode_attention (every query length must be 1)."""
    return case.query, case.key_cache, case.value_cache, case.block_tables, case.seq_lens, case.scale


def prefill_args(case: PagedCase) -> tuple:
    """Arguments of paged_prefill_attention."""
    c = case
    return c.query, c.key_cache, c.value_cache, c.block_tables, c.query_start_loc, c.seq_lens, c.scale


def upcast(args: tuple) -> tuple:
    """The same arguments with floating tensors in fp32: the exact answer a kernel's output is compared with."""
    return tuple(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
