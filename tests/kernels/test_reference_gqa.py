"""The torch reference's grouped-query attention (kernels/reference.py, what CPU replicas run) against attention
written out densely per sequence: the query heads that share a KV head are folded into its query rows rather than
the keys copied per head, for decodes and for the short query runs of speculative verification."""

import pytest
import torch
import torch.nn.functional as F

from kernels import reference

BLOCK_SIZE = 4
HEAD_DIM = 8


def _paged(seq_lens: list[int], num_kv_heads: int, seed: int):
    """A random KV cache with each sequence's blocks scattered over it, and the block tables that find them."""
    gen = torch.Generator().manual_seed(seed)
    blocks_each = [-(-n // BLOCK_SIZE) for n in seq_lens]
    num_blocks = sum(blocks_each) + 3
    key_cache = torch.randn(num_blocks, BLOCK_SIZE, num_kv_heads, HEAD_DIM, generator=gen)
    value_cache = torch.randn(num_blocks, BLOCK_SIZE, num_kv_heads, HEAD_DIM, generator=gen)
    order = torch.randperm(num_blocks, generator=gen)
    tables = torch.zeros(len(seq_lens), max(blocks_each), dtype=torch.int32)
    taken = 0
    for s, count in enumerate(blocks_each):
        tables[s, :count] = order[taken : taken + count]
        taken += count
    return key_cache, value_cache, tables, gen


def _dense(query, key_cache, value_cache, table, seq_len: int, scale: float) -> torch.Tensor:
    """One sequence's last len(query) positions attending causally over its context, every head written out."""
    num_q_heads, num_kv_heads = query.shape[1], key_cache.shape[2]
    slots = (table.long()[:, None] * BLOCK_SIZE + torch.arange(BLOCK_SIZE)).reshape(-1)[:seq_len]
    keys = key_cache.view(-1, num_kv_heads, HEAD_DIM)[slots].transpose(0, 1)
    values = value_cache.view(-1, num_kv_heads, HEAD_DIM)[slots].transpose(0, 1)
    per_kv = num_q_heads // num_kv_heads
    keys, values = keys.repeat_interleave(per_kv, 0), values.repeat_interleave(per_kv, 0)
    q_len = query.shape[0]
    positions = torch.arange(seq_len - q_len, seq_len)
    mask = positions[:, None] >= torch.arange(seq_len)[None, :]
    return F.scaled_dot_product_attention(query.transpose(0, 1), keys, values, attn_mask=mask, scale=scale).transpose(
        0, 1
    )


@pytest.mark.parametrize(("num_q_heads", "num_kv_heads"), [(6, 2), (4, 4), (8, 1)])
def test_decode_matches_dense_attention(num_q_heads: int, num_kv_heads: int) -> None:
    seq_lens = [1, 5, 17, 9, 40]  # lengths more than twice apart: several padded groups
    key_cache, value_cache, tables, gen = _paged(seq_lens, num_kv_heads, seed=num_q_heads)
    query = torch.randn(len(seq_lens), num_q_heads, HEAD_DIM, generator=gen)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    out = reference.paged_decode_attention(query, key_cache, value_cache, tables, lens, 0.3)
    for s, seq_len in enumerate(seq_lens):
        expected = _dense(query[s : s + 1], key_cache, value_cache, tables[s], seq_len, 0.3)
        torch.testing.assert_close(out[s : s + 1], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("num_q_heads", "num_kv_heads"), [(6, 2), (8, 1)])
def test_short_query_runs_match_dense_attention(num_q_heads: int, num_kv_heads: int) -> None:
    """Three sequences verifying 3 drafted tokens each (3 queries over a longer context), attended as one group."""
    seq_lens, q_len = [11, 20, 7], 3
    assert q_len <= reference._SHORT_QUERY_TOKENS
    key_cache, value_cache, tables, gen = _paged(seq_lens, num_kv_heads, seed=7)
    query = torch.randn(len(seq_lens) * q_len, num_q_heads, HEAD_DIM, generator=gen)
    starts = torch.arange(0, len(seq_lens) * q_len + 1, q_len, dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    out = reference.paged_prefill_attention(query, key_cache, value_cache, tables, starts, lens, 0.3)
    for s, seq_len in enumerate(seq_lens):
        rows = slice(s * q_len, (s + 1) * q_len)
        expected = _dense(query[rows], key_cache, value_cache, tables[s], seq_len, 0.3)
        torch.testing.assert_close(out[rows], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("num_q_heads", "num_kv_heads"), [(6, 2), (4, 4)])
@pytest.mark.parametrize("scores_bytes", [16 << 20, 4 * 6 * 64 * 20])  # one query block, or blocks of 16-20 rows
def test_prefill_chunks_match_dense_attention(num_q_heads, num_kv_heads, scores_bytes, monkeypatch) -> None:
    """A whole prompt (causal from position 0) and a chunk after a cached prefix, in query blocks of any size."""
    monkeypatch.setattr(reference, "_SCORES_BYTES", scores_bytes)
    seq_lens, q_lens = [45, 61], [45, 23]  # the second: 38 cached tokens, then a 23-token chunk
    key_cache, value_cache, tables, gen = _paged(seq_lens, num_kv_heads, seed=11)
    query = torch.randn(sum(q_lens), num_q_heads, HEAD_DIM, generator=gen)
    starts = torch.tensor([0, q_lens[0], sum(q_lens)], dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    out = reference.paged_prefill_attention(query, key_cache, value_cache, tables, starts, lens, 0.3)
    for s, seq_len in enumerate(seq_lens):
        rows = slice(int(starts[s]), int(starts[s + 1]))
        expected = _dense(query[rows], key_cache, value_cache, tables[s], seq_len, 0.3)
        torch.testing.assert_close(out[rows], expected, rtol=1e-5, atol=1e-5)
