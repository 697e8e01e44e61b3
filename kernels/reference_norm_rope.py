"""Pure-torch references for RMSNorm (plain and with the residual add fused in) and rotary embedding.

They follow HF Llama's numerics, which the engine's model code uses too: normalise in fp32, round to the model dtype,
then scale by the weight in the model dtype; the residual sum is rounded to the model dtype before it is normalised.

Shapes (T: tokens, H: hidden size, Hq/Hkv: query/KV heads, D: head dim, P: max positions):
    x, residual      [T, H]
    weight           [H]
    query            [T, Hq, D]
    key              [T, Hkv, D]
    positions        [T] int64
    cos, sin         [P, D]    rotate-half tables (HF layout: both halves of a row hold the same frequencies)
"""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x: [T, H] -> [T, H] in x's dtype."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pre-norm block boundary: residual_sum = x + residual; returns (rms_norm(residual_sum), residual_sum)."""
    residual_sum = x + residual
    return rms_norm(residual_sum, weight, eps), residual_sum


def apply_rotary(
    query: torch.Tensor, key: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE (HF Llama's convention) of query and key at their positions; returns new tensors.

    Computed in fp32 and rounded once, so it is the exact value the Triton kernel aims at.
    """
    cos_t = cos[positions].float().unsqueeze(1)  # [T, 1, D]
    sin_t = sin[positions].float().unsqueeze(1)
    return _rotate(query, cos_t, sin_t), _rotate(key, cos_t, sin_t)


def _rotate(x: torch.Tensor, cos_t: torch.Tensor, sin_t: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    half = x.shape[-1] // 2
    rotated_half = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos_t + rotated_half * sin_t).to(x.dtype)
