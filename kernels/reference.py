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

# Query runs up to this long (speculative verification: k + 1) are batched like decodes in the prefill path.
_SHORT_QUERY_TOKENS = 16


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

    Sequences are grouped by length so that each group pads to at most twice its shortest member (heavy-tailed
    lengths would otherwise pad every sequence to the longest one), and K/V are gathered a whole block at a time.
    """
    out = torch.empty_like(query)
    lens = seq_lens.tolist()
    order = sorted(range(len(lens)), key=lens.__getitem__)
    group: list[int] = []
    for i in order:
        if group and lens[i] > 2 * lens[group[0]]:
            _attend_group(query, key_cache, value_cache, block_tables, seq_lens, scale, group, group, 1, out)
            group = []
        group.append(i)
    _attend_group(query, key_cache, value_cache, block_tables, seq_lens, scale, group, group, 1, out)
    return out


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
    head_dim = query.shape[2]
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    flat_k = key_cache.view(-1, num_kv_heads, head_dim)
    flat_v = value_cache.view(-1, num_kv_heads, head_dim)
    out = torch.empty_like(query)
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()
    # Short query runs over a longer context (speculative verification: k + 1 queries) come in batches of equal
    # length; they are attended together, like decodes, instead of one call each.
    short: dict[int, list[int]] = {}
    for s, seq_len in enumerate(lens):
        q_len = starts[s + 1] - starts[s]
        if 1 < q_len <= _SHORT_QUERY_TOKENS and q_len < seq_len:
            short.setdefault(q_len, []).append(s)
    for q_len, rows in short.items():
        first_rows = [starts[s] for s in rows]
        _attend_group(query, key_cache, value_cache, block_tables, seq_lens, scale, rows, first_rows, q_len, out)
    batched = {s for rows in short.values() for s in rows}
    # One call per remaining sequence: prefill chunks are few per step and long, so the loop is per chunk.
    for s, seq_len in enumerate(lens):
        q_start, q_end = starts[s], starts[s + 1]
        q_len = q_end - q_start
        if q_len == 0 or s in batched:
            continue
        slots = _context_slots(block_tables[s : s + 1], seq_len, block_size)[0]  # [L]
        keys = flat_k[slots].transpose(0, 1).to(query.dtype)  # [Hkv, L, D]
        values = flat_v[slots].transpose(0, 1).to(query.dtype)
        q = query[q_start:q_end].transpose(0, 1)  # [Hq, q_len, D]
        out[q_start:q_end] = _causal_attention(q, keys, values, seq_len - q_len, scale).transpose(0, 1)
    return out


_SCORES_BYTES = 16 << 20
"""A query block's scores ([Hq, rows, keys] fp32) stay under this: 256 rows of a 6-head model over 2,048 keys."""


def _causal_attention(q, keys, values, first_position: int, scale: float) -> torch.Tensor:
    """q: [Hq, Q, D], the queries of positions first_position.. ; keys, values: [Hkv, L, D] -> [Hq, Q, D].

    Blocks of queries, each two batched matmuls and a softmax over the keys up to its last row, with the query heads
    that share a KV head folded into its rows: on CPU torch's SDPA took 3.6-5x as long for a causal prefill (a
    2,048-token prompt of the small preset: 139 ms a layer against 27 ms; docs/benchmarks.md)."""
    num_q_heads, q_len, head_dim = q.shape
    num_kv_heads, per_kv = keys.shape[0], num_q_heads // keys.shape[0]
    block = max(16, min(q_len, _SCORES_BYTES // (4 * num_q_heads * keys.shape[1])))
    grouped = q.view(num_kv_heads, per_kv, q_len, head_dim)
    keys_t = keys.transpose(1, 2)  # [Hkv, D, L]
    out = torch.empty_like(q)
    for start in range(0, q_len, block):
        rows = min(block, q_len - start)
        visible = first_position + start + rows  # keys past the block's last query are hidden from all its rows
        block_q = grouped[:, :, start : start + rows].reshape(num_kv_heads, per_kv * rows, head_dim)
        scores = torch.bmm(block_q, keys_t[:, :, :visible]).mul_(scale).view(num_kv_heads, per_kv, rows, visible)
        hidden = torch.ones(rows, visible, dtype=torch.bool, device=q.device).triu_(first_position + start + 1)
        probs = scores.masked_fill_(hidden, float("-inf")).softmax(dim=-1).view(num_kv_heads, per_kv * rows, visible)
        out[:, start : start + rows] = torch.bmm(probs, values[:, :visible]).view(num_q_heads, rows, head_dim)
    return out


def _attend_group(
    query,
    key_cache,
    value_cache,
    block_tables,
    seq_lens,
    scale,
    rows: list[int],
    first_rows: list[int],
    q_len: int,
    out,
) -> None:
    """G sequences (`rows`) attended in one padded batch: sequence rows[g] owns query rows first_rows[g] ..
    first_rows[g] + q_len - 1, its last q_len positions, causal over its whole context. Decode is q_len = 1."""
    block_size, num_kv_heads, head_dim = key_cache.shape[1], key_cache.shape[2], key_cache.shape[3]
    num_q_heads = query.shape[1]
    device = query.device
    index = torch.tensor(rows, device=device)
    group_lens = seq_lens[index].to(device).long()  # [G]
    num_blocks = -(-int(group_lens.max()) // block_size)
    span = num_blocks * block_size
    block_ids = block_tables[index, :num_blocks].to(torch.int64).reshape(-1)  # [G * nb]: whole blocks at a time
    keys = key_cache.index_select(0, block_ids).view(len(rows), span, num_kv_heads, head_dim)
    values = value_cache.index_select(0, block_ids).view(len(rows), span, num_kv_heads, head_dim)
    token_rows = torch.tensor([first + i for first in first_rows for i in range(q_len)], device=device)  # [G * q]
    # The query heads sharing a KV head become extra query rows of it ([G, Hkv, q * per_kv, D]), so the keys and
    # values are read as they are: SDPA's enable_gqa would copy them once per query head of the group.
    per_kv = num_q_heads // num_kv_heads
    q = query[token_rows].view(len(rows), q_len, num_kv_heads, per_kv, head_dim).permute(0, 2, 1, 3, 4)
    q = q.reshape(len(rows), num_kv_heads, q_len * per_kv, head_dim)
    q_pos = group_lens[:, None] - q_len + torch.arange(q_len, device=device)[None, :]  # [G, q]
    mask = torch.arange(span, device=device)[None, None, :] <= q_pos[:, :, None]  # [G, q, L]
    mask = mask.repeat_interleave(per_kv, dim=1) if per_kv > 1 and q_len > 1 else mask  # [G, q * per_kv or 1, L]
    o = F.scaled_dot_product_attention(
        q,
        keys.transpose(1, 2).to(query.dtype),  # [G, Hkv, L, D]
        values.transpose(1, 2).to(query.dtype),
        attn_mask=mask[:, None],
        scale=scale,
    )  # [G, Hkv, q * per_kv, D]
    o = o.view(len(rows), num_kv_heads, q_len, per_kv, head_dim).permute(0, 2, 1, 3, 4)
    out[token_rows] = o.reshape(len(rows) * q_len, num_q_heads, head_dim)
