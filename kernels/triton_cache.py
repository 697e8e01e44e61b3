"""Triton scatter of new K/V rows into their paged-cache slots. Reference: kernels.reference.write_kv_cache.

One program per new token copies all of its KV heads ([Hkv, D], a few KiB) with one load and one store per tensor;
a slot of -1 (padding) returns at once. Offsets are int64: slot * row stride passes 2**31 elements for caches of a
few GiB.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit(do_not_specialize_on_alignment=["slot_mapping_ptr"])  # a step-buffer address (triton_decode.py)
def _write_kv_cache_kernel(
    key_ptr,  # [T, Hkv, D] new keys (any strides)
    value_ptr,  # [T, Hkv, D] new values (any strides)
    key_cache_ptr,  # [N, B, Hkv, D]
    value_cache_ptr,  # [N, B, Hkv, D], same layout as key_cache
    slot_mapping_ptr,  # [T] int64, -1: skip
    stride_key_t,
    stride_key_h,
    stride_key_d,
    stride_value_t,
    stride_value_h,
    stride_value_d,
    stride_cache_n,
    stride_cache_b,
    stride_cache_h,
    stride_cache_d,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    HEADS_PAD: tl.constexpr,  # next power of two >= NUM_KV_HEADS
    DIM_PAD: tl.constexpr,  # next power of two >= HEAD_DIM
):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot < 0:
        return
    heads = tl.arange(0, HEADS_PAD)  # [HEADS_PAD]
    dims = tl.arange(0, DIM_PAD)  # [DIM_PAD]
    mask = (heads[:, None] < NUM_KV_HEADS) & (dims[None, :] < HEAD_DIM)  # [HEADS_PAD, DIM_PAD]
    cache_offsets = (
        (slot // BLOCK_SIZE) * stride_cache_n
        + (slot % BLOCK_SIZE) * stride_cache_b
        + heads[:, None] * stride_cache_h
        + dims[None, :] * stride_cache_d
    )  # [HEADS_PAD, DIM_PAD] int64
    key = tl.load(
        key_ptr + token * stride_key_t + heads[:, None] * stride_key_h + dims[None, :] * stride_key_d, mask=mask
    )  # [HEADS_PAD, DIM_PAD]
    value = tl.load(
        value_ptr + token * stride_value_t + heads[:, None] * stride_value_h + dims[None, :] * stride_value_d,
        mask=mask,
    )  # [HEADS_PAD, DIM_PAD]
    tl.store(key_cache_ptr + cache_offsets, key.to(key_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(value_cache_ptr + cache_offsets, value.to(value_cache_ptr.dtype.element_ty), mask=mask)


def write_kv_cache(
    key: torch.Tensor,  # [T, Hkv, D]
    value: torch.Tensor,  # [T, Hkv, D]
    key_cache: torch.Tensor,  # [N, B, Hkv, D]
    value_cache: torch.Tensor,  # [N, B, Hkv, D]
    slot_mapping: torch.Tensor,  # [T] int64
) -> None:
    """Scatter new K/V rows into their cache slots. Rows with slot -1 are skipped."""
    num_tokens = key.shape[0]
    if num_tokens == 0:
        return
    if key_cache.stride() != value_cache.stride():
        raise ValueError(f"key_cache strides {key_cache.stride()} differ from value_cache's {value_cache.stride()}")
    _, block_size, num_kv_heads, head_dim = key_cache.shape
    _write_kv_cache_kernel[(num_tokens,)](
        key,
        value,
        key_cache,
        value_cache,
        slot_mapping,
        *key.stride(),
        *value.stride(),
        *key_cache.stride(),
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size,
        HEADS_PAD=triton.next_power_of_2(num_kv_heads),
        DIM_PAD=triton.next_power_of_2(head_dim),
    )
