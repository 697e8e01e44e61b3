"""Triton cache writes, RMSNorm and rotary against their torch references, under the CPU interpreter."""

from __future__ import annotations

import pytest
import torch

from kernels import reference, reference_norm_rope
from kernels.triton_cache import write_kv_cache
from kernels.triton_norm_rope import add_rms_norm, apply_rotary, rms_norm

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# Elementwise ops round once at the end, as the references do: allow one unit in the last place of the dtype.
TOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_write_kv_cache_skips_padding_slots(dtype):
    gen = torch.Generator().manual_seed(0)
    num_blocks, block_size, num_kv_heads, head_dim = 6, 8, 3, 24  # Hkv and D not powers of two
    key_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen).to(dtype)
    value_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen).to(dtype)
    # The model's K/V are views of the fused qkv projection, so their row stride is wider than Hkv * D.
    kv = torch.randn(7, 2, num_kv_heads, head_dim + 8, generator=gen).to(dtype)[..., :head_dim]
    key, value = kv[:, 0], kv[:, 1]
    slot_mapping = torch.tensor([0, -1, 13, 47, -1, 8, 20])
    expected_k, expected_v = key_cache.clone(), value_cache.clone()
    reference.write_kv_cache(key, value, expected_k, expected_v, slot_mapping)
    write_kv_cache(key, value, key_cache, value_cache, slot_mapping)
    assert torch.equal(key_cache, expected_k) and torch.equal(value_cache, expected_v)


def test_write_kv_cache_all_padding_changes_nothing():
    key_cache = torch.randn(2, 4, 1, 8)
    before = key_cache.clone()
    write_kv_cache(torch.ones(3, 1, 8), torch.ones(3, 1, 8), key_cache, key_cache.clone(), torch.full((3,), -1))
    assert torch.equal(key_cache, before)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm(dtype):
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(5, 48, generator=gen) * 3).to(dtype)  # H = 48: not a power of two
    weight = (1 + 0.1 * torch.randn(48, generator=gen)).to(dtype)
    out = rms_norm(x, weight, 1e-5)
    torch.testing.assert_close(out, reference_norm_rope.rms_norm(x, weight, 1e-5), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_add_rms_norm_returns_rounded_residual_sum(dtype):
    gen = torch.Generator().manual_seed(2)
    x, residual = (torch.randn(2, 6, 64, generator=gen) * 2).to(dtype)
    weight = (1 + 0.1 * torch.randn(64, generator=gen)).to(dtype)
    out, residual_sum = add_rms_norm(x, residual, weight, 1e-6)
    expected_out, expected_sum = reference_norm_rope.add_rms_norm(x, residual, weight, 1e-6)
    assert torch.equal(residual_sum, expected_sum)
    torch.testing.assert_close(out, expected_out, atol=TOL[dtype], rtol=TOL[dtype])


def test_rotary_reference_matches_rotate_half_formula():
    gen = torch.Generator().manual_seed(3)
    query, positions = torch.randn(4, 2, 8, generator=gen), torch.tensor([0, 5, 2, 9])
    cos, sin = _tables(head_dim=8, max_positions=16)
    half = torch.cat((-query[..., 4:], query[..., :4]), dim=-1)
    expected = query * cos[positions][:, None] + half * sin[positions][:, None]
    rotated, _ = reference_norm_rope.apply_rotary(query, query[:, :1], positions, cos, sin)
    torch.testing.assert_close(rotated, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_on_qkv_views(dtype):
    gen = torch.Generator().manual_seed(4)
    num_tokens, num_q_heads, num_kv_heads, head_dim = 6, 6, 2, 32  # Hq = 6: not a power of two
    qkv = torch.randn(num_tokens, (num_q_heads + 2 * num_kv_heads) * head_dim, generator=gen).to(dtype)
    query = qkv[:, : num_q_heads * head_dim].view(num_tokens, num_q_heads, head_dim)
    key = qkv[:, num_q_heads * head_dim : (num_q_heads + num_kv_heads) * head_dim].view(num_tokens, num_kv_heads, -1)
    positions = torch.tensor([7, 0, 63, 3, 3, 40])  # unsorted, repeated: as in a ragged batch
    cos, sin = (t.to(dtype) for t in _tables(head_dim, max_positions=64))
    q_out, k_out = apply_rotary(query, key, positions, cos, sin)
    expected_q, expected_k = reference_norm_rope.apply_rotary(query, key, positions, cos, sin)
    torch.testing.assert_close(q_out, expected_q, atol=TOL[dtype], rtol=TOL[dtype])
    torch.testing.assert_close(k_out, expected_k, atol=TOL[dtype], rtol=TOL[dtype])


def _tables(head_dim: int, max_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.arange(max_positions).float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)  # [P, D]
    return emb.cos(), emb.sin()
