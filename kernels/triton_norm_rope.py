"""Triton RMSNorm (optionally with the residual add fused in) and rotary embedding.
References: kernels.reference_norm_rope.rms_norm / add_rms_norm / apply_rotary.

Why these pay: in torch, `hidden + residual` then RMSNorm is five or more passes over [T, H] (add, float copy,
square-mean, scale, cast, weight multiply); fused it is one read of each input and one write of each output. Rotary
in torch builds rotate_half copies and indexes cos/sin per token for q and k separately; fused it is one read and one
write of q and k. Both are memory-bound, so passes are the cost.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(
    out_ptr,  # [T, H]
    residual_out_ptr,  # [T, H] x + residual (unused without HAS_RESIDUAL)
    x_ptr,  # [T, H]
    residual_ptr,  # [T, H] (unused without HAS_RESIDUAL)
    weight_ptr,  # [H]
    eps,
    stride_x_t,
    stride_residual_t,
    stride_out_t,
    stride_residual_out_t,
    HIDDEN: tl.constexpr,
    H_PAD: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, H_PAD)  # [H_PAD]
    mask = cols < HIDDEN
    x = tl.load(x_ptr + row * stride_x_t + cols, mask=mask, other=0.0)  # [H_PAD]
    dtype = x.dtype
    if HAS_RESIDUAL:
        residual = tl.load(residual_ptr + row * stride_residual_t + cols, mask=mask, other=0.0)
        # Round the sum to the model dtype before normalising it, as the unfused model does.
        x = (x.to(tl.float32) + residual.to(tl.float32)).to(dtype)
        tl.store(residual_out_ptr + row * stride_residual_out_t + cols, x, mask=mask)
    xf = x.to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(xf * xf, axis=0) / HIDDEN + eps)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0)  # [H_PAD]
    y = (xf * inv_rms).to(dtype).to(tl.float32) * weight.to(tl.float32)
    tl.store(out_ptr + row * stride_out_t + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x: [T, H] (rows contiguous) -> [T, H] in x's dtype."""
    out = torch.empty_like(x, dtype=torch.promote_types(x.dtype, weight.dtype))
    _launch_rms_norm(out, out, x, x, weight, eps, has_residual=False)
    return out


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """x, residual: [T, H] -> (rms_norm(x + residual), x + residual)."""
    out = torch.empty_like(x, dtype=torch.promote_types(x.dtype, weight.dtype))
    residual_out = torch.empty_like(x)
    _launch_rms_norm(out, residual_out, x, residual, weight, eps, has_residual=True)
    return out, residual_out


def _launch_rms_norm(out, residual_out, x, residual, weight, eps: float, has_residual: bool) -> None:
    num_tokens, hidden = x.shape
    if num_tokens == 0:
        return
    for name, t in (("x", x), ("residual", residual), ("weight", weight)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have contiguous rows (stride(-1) == 1), got strides {t.stride()}")
    _rms_norm_kernel[(num_tokens,)](
        out,
        residual_out,
        x,
        residual,
        weight,
        eps,
        x.stride(0),
        residual.stride(0),
        out.stride(0),
        residual_out.stride(0),
        HIDDEN=hidden,
        H_PAD=triton.next_power_of_2(hidden),
        HAS_RESIDUAL=has_residual,
    )


@triton.jit(do_not_specialize_on_alignment=["positions_ptr"])  # a step-buffer address (triton_decode.py)
def _rotary_kernel(
    query_out_ptr,  # [T, Hq, D] contiguous
    key_out_ptr,  # [T, Hkv, D] contiguous
    query_ptr,  # [T, Hq, D]
    key_ptr,  # [T, Hkv, D]
    positions_ptr,  # [T] int64
    cos_ptr,  # [P, D]
    sin_ptr,  # [P, D]
    stride_query_t,
    stride_query_h,
    stride_key_t,
    stride_key_h,
    stride_table_p,
    NUM_Q_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    HQ_PAD: tl.constexpr,
    HKV_PAD: tl.constexpr,
    HALF_DIM: tl.constexpr,
    HALF_PAD: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    position = tl.load(positions_ptr + token).to(tl.int64)
    half = tl.arange(0, HALF_PAD)  # [HALF_PAD]
    half_mask = half < HALF_DIM
    table = position * stride_table_p
    # Both halves of a row are loaded: HF's tables repeat the frequencies, but nothing here relies on it.
    cos_lo = tl.load(cos_ptr + table + half, mask=half_mask, other=0.0).to(tl.float32)[None, :]  # [1, HALF_PAD]
    cos_hi = tl.load(cos_ptr + table + HALF_DIM + half, mask=half_mask, other=0.0).to(tl.float32)[None, :]
    sin_lo = tl.load(sin_ptr + table + half, mask=half_mask, other=0.0).to(tl.float32)[None, :]
    sin_hi = tl.load(sin_ptr + table + HALF_DIM + half, mask=half_mask, other=0.0).to(tl.float32)[None, :]

    q_heads = tl.arange(0, HQ_PAD)  # [HQ_PAD]
    q_mask = (q_heads[:, None] < NUM_Q_HEADS) & half_mask[None, :]  # [HQ_PAD, HALF_PAD]
    q_in = query_ptr + token * stride_query_t + q_heads[:, None] * stride_query_h + half[None, :]
    q_out = query_out_ptr + (token * NUM_Q_HEADS + q_heads[:, None]) * (2 * HALF_DIM) + half[None, :]
    _rotate_tile(q_in, q_out, q_mask, cos_lo, cos_hi, sin_lo, sin_hi, HALF_DIM)

    k_heads = tl.arange(0, HKV_PAD)  # [HKV_PAD]
    k_mask = (k_heads[:, None] < NUM_KV_HEADS) & half_mask[None, :]  # [HKV_PAD, HALF_PAD]
    k_in = key_ptr + token * stride_key_t + k_heads[:, None] * stride_key_h + half[None, :]
    k_out = key_out_ptr + (token * NUM_KV_HEADS + k_heads[:, None]) * (2 * HALF_DIM) + half[None, :]
    _rotate_tile(k_in, k_out, k_mask, cos_lo, cos_hi, sin_lo, sin_hi, HALF_DIM)


@triton.jit
def _rotate_tile(in_ptrs, out_ptrs, mask, cos_lo, cos_hi, sin_lo, sin_hi, HALF_DIM: tl.constexpr):
    # in_ptrs/out_ptrs: [H_PAD, HALF_PAD] pointers to the first half of each head; x * cos + rotate_half(x) * sin
    x_lo = tl.load(in_ptrs, mask=mask, other=0.0)  # [H_PAD, HALF_PAD]
    x_hi = tl.load(in_ptrs + HALF_DIM, mask=mask, other=0.0)
    dtype = x_lo.dtype
    lo = x_lo.to(tl.float32)
    hi = x_hi.to(tl.float32)
    tl.store(out_ptrs, (lo * cos_lo - hi * sin_lo).to(dtype), mask=mask)
    tl.store(out_ptrs + HALF_DIM, (hi * cos_hi + lo * sin_hi).to(dtype), mask=mask)


def apply_rotary(
    query: torch.Tensor,  # [T, Hq, D], last dim contiguous
    key: torch.Tensor,  # [T, Hkv, D], last dim contiguous
    positions: torch.Tensor,  # [T] int64
    cos: torch.Tensor,  # [P, D]
    sin: torch.Tensor,  # [P, D]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE of query and key at their positions; returns new contiguous tensors."""
    num_tokens, num_q_heads, head_dim = query.shape
    num_kv_heads = key.shape[1]
    query_out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    key_out = torch.empty(key.shape, dtype=key.dtype, device=key.device)
    if num_tokens == 0:
        return query_out, key_out
    if head_dim % 2:
        raise ValueError(f"head_dim={head_dim} must be even for rotary embedding")
    for name, t in (("query", query), ("key", key), ("cos", cos), ("sin", sin)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dim, got strides {t.stride()}")
    if cos.stride() != sin.stride():
        raise ValueError(f"cos strides {cos.stride()} differ from sin's {sin.stride()}")
    half_dim = head_dim // 2
    _rotary_kernel[(num_tokens,)](
        query_out,
        key_out,
        query,
        key,
        positions,
        cos,
        sin,
        query.stride(0),
        query.stride(1),
        key.stride(0),
        key.stride(1),
        cos.stride(0),
        NUM_Q_HEADS=num_q_heads,
        NUM_KV_HEADS=num_kv_heads,
        HQ_PAD=triton.next_power_of_2(num_q_heads),
        HKV_PAD=triton.next_power_of_2(num_kv_heads),
        HALF_DIM=half_dim,
        HALF_PAD=triton.next_power_of_2(half_dim),
    )
    return query_out, key_out
