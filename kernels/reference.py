"""Pure-torch reference kernels. They are the CPU engine's attention path and the ground truth the Triton kernels
are tested against, so they favour clarity, then batched tensor ops (no per-token Python).

Shapes (T: tokens in the flattened batch, S: sequences, Hq/Hkv: query/KV heads, D: head dim, N: blocks,
B: block size, M: max blocks per sequence):
    query            [T, Hq, D]
    key, value       [T, Hkv, D]           new tokens' K/V, written before attention reads the cache
    key_cache        [N, B, Hkv, D]
    slot_mapping     [T] int64             cache slot of each new token (-1: skip, e.g. padding)
    block_tables     [S, M] int32          padded with any valid block id (never read past seq_lens)
    seq_lens         [S] int32             context length of each sequence *including* its new tokens
    query_start_loc  [S + 1] int32         sequence s owns query rows query_start_loc[s]:query_start_loc[s+1]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Scatter new K/V rows into their cache slots. Rows with slot -1 are skipped."""
    num_kv_heads, head_dim = key_cache.shape[2], key_cache.shape[3]
    flat_k = key_cache.view(-1, num_kv_heads, head_dim)
    flat_v = value_cache.view(-1, num_kv_heads, head_dim)
    valid = slot_mapping >= 0
    if not bool(valid.all()):
        key, value, slot_mapping = key[valid], value[valid], slot_mapping[valid]
    flat_k.index_copy_(0, slot_mapping, key.to(flat_k.dtype))
    flat_v.index_copy_(0, slot_mapping, value.to(flat_v.dtype))


def _context_slots(block_tables: torch.Tensor, num_positions: int, block_size: int) -> torch.Tensor:
    """[S, num_positions] int64 cache slots of positions 0..num_positions-1 of every sequence."""
    positions = torch.arange(num_positions, device=block_tables.device)
    block_ids = block_tables[:, positions // block_size].to(torch.int64)  # [S, L]
    return block_ids * block_size + positions % block_size


def paged_decode_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One query token per sequence (the last position) over its whole cached context.

    query: [S, Hq, D] -> out [S, Hq, D]
    """
    num_seqs, num_q_heads, head_dim = query.shape
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    max_len = int(seq_lens.max())
    slots = _context_slots(block_tables, max_len, block_size)  # [S, L]
    keys = key_cache.view(-1, num_kv_heads, head_dim)[slots]  # [S, L, Hkv, D]
    values = value_cache.view(-1, num_kv_heads, head_dim)[slots]
    valid = torch.arange(max_len, device=query.device)[None, :] < seq_lens[:, None].to(query.device)  # [S, L]
    out = F.scaled_dot_product_attention(
        query.unsqueeze(2),  # [S, Hq, 1, D]
        keys.transpose(1, 2).to(query.dtype),  # [S, Hkv, L, D]
        values.transpose(1, 2).to(query.dtype),
        attn_mask=valid[:, None, None, :],
        scale=scale,
        enable_gqa=num_q_heads != num_kv_heads,
    )
    return out.squeeze(2)


def paged_prefill_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Causal attention for chunks of queries over the paged cache (cached prefix blocks + the chunk itself).

    The queries of sequence s are its last q_len positions: seq_lens[s] - q_len .. seq_lens[s] - 1.
    query: [T, Hq, D] -> out [T, Hq, D]
    """
    num_q_heads, head_dim = query.shape[1], query.shape[2]
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    flat_k = key_cache.view(-1, num_kv_heads, head_dim)
    flat_v = value_cache.view(-1, num_kv_heads, head_dim)
    out = torch.empty_like(query)
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()
    # One SDPA call per sequence: prefill chunks are few per step and long, so the loop is per chunk, not per token.
    for s, seq_len in enumerate(lens):
        q_start, q_end = starts[s], starts[s + 1]
        q_len = q_end - q_start
        if q_len == 0:
            continue
        slots = _context_slots(block_tables[s : s + 1], seq_len, block_size)[0]  # [L]
        keys = flat_k[slots].transpose(0, 1).to(query.dtype)  # [Hkv, L, D]
        values = flat_v[slots].transpose(0, 1).to(query.dtype)
        q = query[q_start:q_end].transpose(0, 1)  # [Hq, q_len, D]
        if q_len == seq_len:
            mask, causal = None, True
        else:
            q_pos = torch.arange(seq_len - q_len, seq_len, device=query.device)
            mask = q_pos[:, None] >= torch.arange(seq_len, device=query.device)[None, :]  # [q_len, L]
            causal = False
        o = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=num_q_heads != num_kv_heads
        )
        out[q_start:q_end] = o.transpose(0, 1)
    return out
