"""Triton attention for prefill chunks over the paged cache. Reference: kernels.reference.paged_prefill_attention.

The chunk's own K/V were written into the cache first, so the queries read one uniform source: the cached prefix
blocks and the chunk itself, causal. Chunked prefill and prefix-cache hits therefore need no copies.

    grid = (T // BLOCK_Q + S, Hkv)     axis 0 enumerates (sequence, query tile) pairs; T // BLOCK_Q + S is an upper
                                       bound on sum_s ceil(q_len_s / BLOCK_Q) that needs no host sync (programs past
                                       their sequence's last tile return at once)
    program: Q tile [BLOCK_Q * G_PAD, D_PAD]   row r = query token r // G_PAD of the tile, query head
                                       kv_head * G + r % G_PAD, so a K/V tile feeds all G heads that share it
             loop over context tokens 0 .. (last query position of the tile) in tiles of TILE_N, online softmax
             in fp32 (exp2 domain); query i of a chunk of q_len sits at position seq_len - q_len + i.

A program finds its sequence by binary search over query_start_loc: sequence s owns programs starting at
query_start_loc[s] // BLOCK_Q + s. All cache offsets are int64.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

TILE_N = 64  # context tokens per inner-loop tile
BLOCK_M = 64  # query rows (tokens x heads of a GQA group) per program
_LOG2E = 1.4426950408889634


@triton.jit(
    # As in the decode kernel: per-step values and step-buffer addresses would each compile a variant mid-run.
    do_not_specialize=["num_seqs", "stride_table_s"],
    do_not_specialize_on_alignment=["block_tables_ptr", "query_start_loc_ptr", "seq_lens_ptr"],
)
def _prefill_kernel(
    out_ptr,  # [T, Hq, D]
    query_ptr,  # [T, Hq, D]
    key_cache_ptr,  # [N, B, Hkv, D]
    value_cache_ptr,  # [N, B, Hkv, D], same strides as key_cache
    block_tables_ptr,  # [S, M] int32
    query_start_loc_ptr,  # [S + 1] int32
    seq_lens_ptr,  # [S] int32
    scale_log2e,  # softmax scale * log2(e)
    num_seqs,
    stride_query_t,
    stride_query_h,
    stride_query_d,
    stride_out_t,
    stride_out_h,
    stride_out_d,
    stride_cache_n,
    stride_cache_b,
    stride_cache_h,
    stride_cache_d,
    stride_table_s,
    stride_table_m,
    QUERIES_PER_KV: tl.constexpr,  # G = Hq / Hkv
    G_PAD: tl.constexpr,  # power of two >= G
    BLOCK_Q: tl.constexpr,  # query tokens per program; BLOCK_Q * G_PAD >= 16 rows for tl.dot
    HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    pid = tl.program_id(0)
    kv_head = tl.program_id(1)

    # Largest s with query_start_loc[s] // BLOCK_Q + s <= pid (the tile starts increase strictly with s).
    lo = tl.full([], 0, tl.int32)  # tensors from the start: loop-carried values must keep one type when compiled
    hi = lo + num_seqs
    while hi - lo > 1:
        mid = (lo + hi) // 2
        mid_start = tl.load(query_start_loc_ptr + mid) // BLOCK_Q + mid
        lo = tl.where(mid_start <= pid, mid, lo)
        hi = tl.where(mid_start <= pid, hi, mid)
    seq = lo.to(tl.int64)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    q_tile = pid - (q_start // BLOCK_Q + lo)
    if q_tile * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    prefix_len = seq_len - q_len

    rows = tl.arange(0, BLOCK_Q * G_PAD)  # [BLOCK_M]
    tokens = q_tile * BLOCK_Q + rows // G_PAD  # [BLOCK_M] query index within the chunk
    q_heads = kv_head * QUERIES_PER_KV + rows % G_PAD  # [BLOCK_M]
    row_mask = (tokens < q_len) & (rows % G_PAD < QUERIES_PER_KV)
    dims = tl.arange(0, D_PAD)  # [D_PAD]
    dim_mask = dims < HEAD_DIM
    q_rows = (q_start + tokens).to(tl.int64)  # [BLOCK_M] row of the flattened batch
    q_offsets = q_rows[:, None] * stride_query_t + q_heads[:, None] * stride_query_h + dims[None, :] * stride_query_d
    q = tl.load(
        query_ptr + q_offsets,
        mask=row_mask[:, None] & dim_mask[None, :],
        other=0.0,
    )  # [BLOCK_M, D_PAD]
    cache_dtype = key_cache_ptr.dtype.element_ty
    q = q.to(cache_dtype)
    q_positions = prefix_len + tokens  # [BLOCK_M]

    row_max = tl.full([BLOCK_Q * G_PAD], float("-inf"), tl.float32)  # [BLOCK_M] log2 domain
    row_sum = tl.zeros([BLOCK_Q * G_PAD], tl.float32)  # [BLOCK_M]
    acc = tl.zeros([BLOCK_Q * G_PAD, D_PAD], tl.float32)  # [BLOCK_M, D_PAD]
    table_row = block_tables_ptr + seq * stride_table_s
    head_offset = kv_head.to(tl.int64) * stride_cache_h
    # Context this tile can see: up to its last query's position (and never past the sequence).
    context_end = tl.minimum(seq_len, prefix_len + (q_tile + 1) * BLOCK_Q)
    for tile_start in range(0, context_end, TILE):
        positions = tile_start + tl.arange(0, TILE)  # [TILE]
        pos_mask = positions < context_end
        block_ids = tl.load(table_row + (positions // BLOCK_SIZE) * stride_table_m, mask=pos_mask, other=0)
        token_offsets = (
            block_ids.to(tl.int64) * stride_cache_n + (positions % BLOCK_SIZE) * stride_cache_b + head_offset
        )  # [TILE] int64
        k_t = tl.load(
            key_cache_ptr + token_offsets[None, :] + dims[:, None] * stride_cache_d,
            mask=pos_mask[None, :] & dim_mask[:, None],
            other=0.0,
        )  # [D_PAD, TILE]
        scores = tl.dot(q, k_t, input_precision=DOT_PRECISION) * scale_log2e  # [BLOCK_M, TILE]
        # Position 0 is visible to every row, so each row's max is finite after the first tile (no inf - inf).
        visible = (positions[None, :] <= q_positions[:, None]) & pos_mask[None, :]
        scores = tl.where(visible, scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))  # [BLOCK_M]
        probs = tl.exp2(scores - new_max[:, None])  # [BLOCK_M, TILE]
        rescale = tl.exp2(row_max - new_max)  # [BLOCK_M]
        row_sum = row_sum * rescale + tl.sum(probs, axis=1)
        v = tl.load(
            value_cache_ptr + token_offsets[:, None] + dims[None, :] * stride_cache_d,
            mask=pos_mask[:, None] & dim_mask[None, :],
            other=0.0,
        )  # [TILE, D_PAD]
        acc = acc * rescale[:, None] + tl.dot(probs.to(cache_dtype), v, input_precision=DOT_PRECISION)
        row_max = new_max

    out_tile = acc / row_sum[:, None]  # [BLOCK_M, D_PAD]
    tl.store(
        out_ptr + q_rows[:, None] * stride_out_t + q_heads[:, None] * stride_out_h + dims[None, :] * stride_out_d,
        out_tile.to(out_ptr.dtype.element_ty),
        mask=row_mask[:, None] & dim_mask[None, :],
    )


def paged_prefill_attention(
    query: torch.Tensor,  # [T, Hq, D]
    key_cache: torch.Tensor,  # [N, B, Hkv, D]
    value_cache: torch.Tensor,  # [N, B, Hkv, D]
    block_tables: torch.Tensor,  # [S, M] int32
    query_start_loc: torch.Tensor,  # [S + 1] int32
    seq_lens: torch.Tensor,  # [S] int32
    scale: float,
) -> torch.Tensor:
    """Causal attention for chunks of queries over the paged cache (cached prefix blocks + the chunk itself).

    The queries of sequence s are its last q_len positions: seq_lens[s] - q_len .. seq_lens[s] - 1.
    query: [T, Hq, D] -> out [T, Hq, D]
    """
    num_tokens, num_q_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = key_cache.shape
    num_seqs = seq_lens.shape[0]
    out = torch.empty_like(query)
    if num_tokens == 0 or num_seqs == 0:
        return out
    if num_q_heads % num_kv_heads:
        raise ValueError(f"{num_q_heads} query heads is not a multiple of {num_kv_heads} KV heads")
    if key_cache.stride() != value_cache.stride():
        raise ValueError(f"key_cache strides {key_cache.stride()} differ from value_cache's {value_cache.stride()}")
    queries_per_kv = num_q_heads // num_kv_heads
    g_pad = triton.next_power_of_2(queries_per_kv)
    block_q = max(1, BLOCK_M // g_pad)
    _prefill_kernel[(num_tokens // block_q + num_seqs, num_kv_heads)](
        out,
        query,
        key_cache,
        value_cache,
        block_tables,
        query_start_loc,
        seq_lens,
        scale * _LOG2E,
        num_seqs,
        *query.stride(),
        *out.stride(),
        *key_cache.stride(),
        *block_tables.stride(),
        QUERIES_PER_KV=queries_per_kv,
        G_PAD=g_pad,
        BLOCK_Q=block_q,
        HEAD_DIM=head_dim,
        D_PAD=triton.next_power_of_2(head_dim),
        BLOCK_SIZE=block_size,
        TILE=TILE_N,
        DOT_PRECISION="ieee" if key_cache.dtype == torch.float32 else "tf32",
    )
    return out
