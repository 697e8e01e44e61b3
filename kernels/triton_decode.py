"""Triton paged decode attention (one query token per sequence). Reference: kernels.reference.paged_decode_attention.

Layout of the work (flash-decoding):

    grid = (S, Hkv, num_splits)        one program = one sequence x one KV head x one slice of the context
    program: Q tile [G_PAD, D_PAD]     all G = Hq / Hkv query heads that share this KV head (GQA/MQA), so every
                                       K/V tile is loaded once for the whole group
             loop over its slice in tiles of TILE_N tokens: gather block ids from the block table, load K/V
             [TILE_N, D], online softmax in fp32 (exp2 domain)
    num_splits == 1: the program normalises and writes the output directly.
    num_splits > 1:  each writes its normalised partial output and log-sum-exp; a second kernel (grid (S, Hq))
                     merges the partitions of each head.

The number of splits comes from host-known shapes only (batch size, KV heads, block_tables' width), never from
seq_lens' values, so the launch needs no device sync and can be captured in a CUDA graph. It splits a context only
when S * Hkv programs would leave SMs idle: long contexts at small batch. All cache offsets are int64.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

TILE_N = 64  # context tokens per inner-loop tile
MIN_PARTITION_TOKENS = 256  # a split shorter than this costs more in the merge than it saves
PROGRAMS_PER_SM = 4  # resident programs per SM the split plan aims for (see plan_splits)
_LOG2E = 1.4426950408889634
_INTERPRETER_SM_COUNT = 4  # a CPU has no SMs; this keeps the split path reachable under TRITON_INTERPRET=1


@functools.cache
def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return _INTERPRETER_SM_COUNT
    return torch.cuda.get_device_properties(device).multi_processor_count


def plan_splits(num_seqs: int, num_kv_heads: int, max_context_tokens: int, sm_count: int) -> tuple[int, int]:
    """(num_splits, partition_tokens) for a launch: about PROGRAMS_PER_SM programs per SM (a gather-bound kernel
    needs several resident per SM to keep enough loads in flight), each partition a power of two of at least
    MIN_PARTITION_TOKENS (few distinct values, so few compiled variants)."""
    programs = num_seqs * num_kv_heads
    wanted = max(1, math.ceil(PROGRAMS_PER_SM * sm_count / programs))
    most = max(1, math.ceil(max_context_tokens / MIN_PARTITION_TOKENS))
    num_splits = min(wanted, most)
    if num_splits == 1:
        return 1, max_context_tokens
    partition_tokens = max(MIN_PARTITION_TOKENS, triton.next_power_of_2(math.ceil(max_context_tokens / num_splits)))
    return math.ceil(max_context_tokens / partition_tokens), partition_tokens


@triton.jit(
    # Values and table/length addresses that change from step to step: specialising on them (== 1, divisible by 16,
    # 16-byte aligned) compiled a new variant mid-run, a stall of about a second each on an H100.
    do_not_specialize=["num_splits", "partition_tokens", "stride_table_s"],
    do_not_specialize_on_alignment=["block_tables_ptr", "seq_lens_ptr"],
)
def _decode_partition_kernel(
    out_ptr,  # [S, Hq, D] final output, written here when ONE_SPLIT
    part_out_ptr,  # [S, Hq, num_splits, D] fp32 normalised partial outputs (unused when ONE_SPLIT)
    part_lse_ptr,  # [S, Hq, num_splits] fp32 log2-sum-exp2 of each partition's scores (unused when ONE_SPLIT)
    query_ptr,  # [S, Hq, D]
    key_cache_ptr,  # [N, B, Hkv, D]
    value_cache_ptr,  # [N, B, Hkv, D], same strides as key_cache
    block_tables_ptr,  # [S, M] int32
    seq_lens_ptr,  # [S] int32
    scale_log2e,  # softmax scale * log2(e): scores go straight into exp2
    num_splits,
    partition_tokens,  # context tokens per split, a multiple of TILE (ignored when ONE_SPLIT)
    stride_query_s,
    stride_query_h,
    stride_query_d,
    stride_out_s,
    stride_out_h,
    stride_out_d,
    stride_cache_n,
    stride_cache_b,
    stride_cache_h,
    stride_cache_d,
    stride_table_s,
    stride_table_m,
    QUERIES_PER_KV: tl.constexpr,  # G = Hq / Hkv
    G_PAD: tl.constexpr,  # power of two >= max(G, 16): tl.dot needs 16 rows
    HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE: tl.constexpr,
    ONE_SPLIT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,  # "ieee" for fp32 (no tf32 rounding), the default otherwise
):
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    part_start = split * partition_tokens
    # Split 0 always runs, so a zero-length sequence (batch padding, e.g. for CUDA graphs) gets zeros, not garbage.
    if part_start >= seq_len and split > 0:
        return
    if ONE_SPLIT:
        part_end = seq_len
    else:
        part_end = tl.minimum(part_start + partition_tokens, seq_len)

    group = tl.arange(0, G_PAD)  # [G_PAD]
    dims = tl.arange(0, D_PAD)  # [D_PAD]
    group_mask = group < QUERIES_PER_KV
    dim_mask = dims < HEAD_DIM
    q_heads = kv_head * QUERIES_PER_KV + group  # [G_PAD]
    q = tl.load(
        query_ptr + seq * stride_query_s + q_heads[:, None] * stride_query_h + dims[None, :] * stride_query_d,
        mask=group_mask[:, None] & dim_mask[None, :],
        other=0.0,
    )  # [G_PAD, D_PAD]
    cache_dtype = key_cache_ptr.dtype.element_ty
    q = q.to(cache_dtype)

    row_max = tl.full([G_PAD], float("-inf"), tl.float32)  # [G_PAD] running max, log2 domain
    row_sum = tl.zeros([G_PAD], tl.float32)  # [G_PAD]
    acc = tl.zeros([G_PAD, D_PAD], tl.float32)  # [G_PAD, D_PAD]
    table_row = block_tables_ptr + seq * stride_table_s
    head_offset = kv_head.to(tl.int64) * stride_cache_h
    for tile_start in range(part_start, part_end, TILE):
        positions = tile_start + tl.arange(0, TILE)  # [TILE]
        pos_mask = positions < part_end
        block_ids = tl.load(table_row + (positions // BLOCK_SIZE) * stride_table_m, mask=pos_mask, other=0)
        token_offsets = (
            block_ids.to(tl.int64) * stride_cache_n + (positions % BLOCK_SIZE) * stride_cache_b + head_offset
        )  # [TILE] int64
        kv_mask = pos_mask[None, :] & dim_mask[:, None]  # [D_PAD, TILE]
        k_t = tl.load(
            key_cache_ptr + token_offsets[None, :] + dims[:, None] * stride_cache_d, mask=kv_mask, other=0.0
        )  # [D_PAD, TILE]
        scores = tl.dot(q, k_t, input_precision=DOT_PRECISION) * scale_log2e  # [G_PAD, TILE]
        scores = tl.where(pos_mask[None, :], scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))  # [G_PAD]
        probs = tl.exp2(scores - new_max[:, None])  # [G_PAD, TILE]
        rescale = tl.exp2(row_max - new_max)  # [G_PAD]
        row_sum = row_sum * rescale + tl.sum(probs, axis=1)
        v = tl.load(
            value_cache_ptr + token_offsets[:, None] + dims[None, :] * stride_cache_d,
            mask=pos_mask[:, None] & dim_mask[None, :],
            other=0.0,
        )  # [TILE, D_PAD]
        acc = acc * rescale[:, None] + tl.dot(probs.to(cache_dtype), v, input_precision=DOT_PRECISION)
        row_max = new_max

    # row_sum >= 1 whenever a position was seen (the max contributes exp2(0)); it is 0 only for an empty context.
    row_sum = tl.maximum(row_sum, 1e-30)
    out_tile = acc / row_sum[:, None]  # [G_PAD, D_PAD]
    head_mask = group_mask[:, None] & dim_mask[None, :]
    if ONE_SPLIT:
        tl.store(
            out_ptr + seq * stride_out_s + q_heads[:, None] * stride_out_h + dims[None, :] * stride_out_d,
            out_tile.to(out_ptr.dtype.element_ty),
            mask=head_mask,
        )
    else:
        num_q_heads = tl.num_programs(1) * QUERIES_PER_KV
        lse_rows = (seq * num_q_heads + q_heads) * num_splits + split  # [G_PAD] row of [S, Hq, num_splits]
        tl.store(part_lse_ptr + lse_rows, row_max + tl.log2(row_sum), mask=group_mask)
        tl.store(part_out_ptr + lse_rows[:, None] * HEAD_DIM + dims[None, :], out_tile, mask=head_mask)


@triton.jit(do_not_specialize=["num_splits", "partition_tokens"], do_not_specialize_on_alignment=["seq_lens_ptr"])
def _decode_merge_kernel(
    out_ptr,  # [S, Hq, D]
    part_out_ptr,  # [S, Hq, num_splits, D] fp32
    part_lse_ptr,  # [S, Hq, num_splits] fp32
    seq_lens_ptr,  # [S] int32
    num_splits,
    partition_tokens,
    stride_out_s,
    stride_out_h,
    stride_out_d,
    HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr,
    SPLITS_PAD: tl.constexpr,  # power of two >= num_splits
):
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    splits = tl.arange(0, SPLITS_PAD)  # [SPLITS_PAD]
    dims = tl.arange(0, D_PAD)  # [D_PAD]
    # Partitions past the sequence's end never ran: they hold garbage and must not be read.
    split_mask = (splits < num_splits) & (splits * partition_tokens < seq_len)
    rows = (seq * tl.num_programs(1) + head) * num_splits + splits  # [SPLITS_PAD]
    lse = tl.load(part_lse_ptr + rows, mask=split_mask, other=float("-inf"))  # [SPLITS_PAD]
    top = tl.maximum(tl.max(lse, axis=0), -1e30)  # finite even when no split ran (empty context): no inf - inf
    weights = tl.where(split_mask, tl.exp2(lse - top), 0.0)  # [SPLITS_PAD]
    partial = tl.load(
        part_out_ptr + rows[:, None] * HEAD_DIM + dims[None, :],
        mask=split_mask[:, None] & (dims[None, :] < HEAD_DIM),
        other=0.0,
    )  # [SPLITS_PAD, D_PAD]
    merged = tl.sum(partial * weights[:, None], axis=0) / tl.maximum(tl.sum(weights, axis=0), 1e-30)  # [D_PAD]
    tl.store(
        out_ptr + seq * stride_out_s + head * stride_out_h + dims * stride_out_d,
        merged.to(out_ptr.dtype.element_ty),
        mask=dims < HEAD_DIM,
    )


def paged_decode_attention(
    query: torch.Tensor,  # [S, Hq, D]
    key_cache: torch.Tensor,  # [N, B, Hkv, D]
    value_cache: torch.Tensor,  # [N, B, Hkv, D]
    block_tables: torch.Tensor,  # [S, M] int32
    seq_lens: torch.Tensor,  # [S] int32
    scale: float,
) -> torch.Tensor:
    """One query token per sequence (the last position) over its whole cached context. A sequence of length 0
    (padding) gets zeros.

    query: [S, Hq, D] -> out [S, Hq, D]
    """
    num_seqs, num_q_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = key_cache.shape
    out = torch.empty_like(query)
    if num_seqs == 0:
        return out
    _check_layout(num_q_heads, num_kv_heads, key_cache, value_cache)
    queries_per_kv = num_q_heads // num_kv_heads
    max_context_tokens = block_tables.shape[1] * block_size
    num_splits, partition = plan_splits(num_seqs, num_kv_heads, max_context_tokens, _sm_count(query.device))
    d_pad = triton.next_power_of_2(head_dim)
    one_split = num_splits == 1
    parts_shape = (num_seqs, num_q_heads, num_splits)
    part_out = query.new_empty((*parts_shape, head_dim) if not one_split else (0,), dtype=torch.float32)
    part_lse = query.new_empty(parts_shape if not one_split else (0,), dtype=torch.float32)
    _decode_partition_kernel[(num_seqs, num_kv_heads, num_splits)](
        out,
        part_out,
        part_lse,
        query,
        key_cache,
        value_cache,
        block_tables,
        seq_lens,
        scale * _LOG2E,
        num_splits,
        partition,
        *query.stride(),
        *out.stride(),
        *key_cache.stride(),
        *block_tables.stride(),
        QUERIES_PER_KV=queries_per_kv,
        G_PAD=max(16, triton.next_power_of_2(queries_per_kv)),
        HEAD_DIM=head_dim,
        D_PAD=d_pad,
        BLOCK_SIZE=block_size,
        TILE=TILE_N,
        ONE_SPLIT=one_split,
        DOT_PRECISION="ieee" if key_cache.dtype == torch.float32 else "tf32",
    )
    if not one_split:
        _decode_merge_kernel[(num_seqs, num_q_heads)](
            out,
            part_out,
            part_lse,
            seq_lens,
            num_splits,
            partition,
            *out.stride(),
            HEAD_DIM=head_dim,
            D_PAD=d_pad,
            SPLITS_PAD=triton.next_power_of_2(num_splits),
        )
    return out


def _check_layout(num_q_heads: int, num_kv_heads: int, key_cache: torch.Tensor, value_cache: torch.Tensor) -> None:
    if num_q_heads % num_kv_heads:
        raise ValueError(f"{num_q_heads} query heads is not a multiple of {num_kv_heads} KV heads")
    if key_cache.stride() != value_cache.stride():
        raise ValueError(f"key_cache strides {key_cache.stride()} differ from value_cache's {value_cache.stride()}")
