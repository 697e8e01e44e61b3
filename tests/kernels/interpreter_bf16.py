"""Two bfloat16 gaps in Triton 3.x's CPU interpreter (it stores bf16 as raw uint16 in numpy), closed for tests:

- fp32 -> bf16 casts truncate instead of rounding to nearest even as the GPU does;
- tl.dot on bf16 operands multiplies the raw uint16 bit patterns.

Both are interpreter emulation bugs, not kernel behaviour: the patch makes the interpreter do what the hardware does
(exact RTNE via torch, bf16 dots on the fp32 values), so bf16 kernel results can be compared with the reference.
"""

from __future__ import annotations

import numpy as np
import torch


def _bf16_bits_to_fp32(bits: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).view(torch.bfloat16).float().numpy()


def _fp32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    rounded = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(torch.bfloat16)
    return rounded.view(torch.int16).numpy().view(np.uint16)


def patch_interpreter_bf16() -> None:
    import triton.language as tl
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    original_cast = InterpreterBuilder.cast_impl
    original_dot = InterpreterBuilder.create_dot
    if getattr(original_cast, "_bf16_patched", False):
        return

    def cast_impl(self, src, dst_type):
        src_type, dst_scalar = src.dtype.scalar, dst_type.scalar
        if src_type == tl.float32 and dst_scalar == tl.bfloat16:
            return TensorHandle(_fp32_to_bf16_bits(src.data), dst_scalar)
        return original_cast(self, src, dst_type)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.scalar == tl.bfloat16:
            a = TensorHandle(_bf16_bits_to_fp32(a.data), tl.float32)
        if b.dtype.scalar == tl.bfloat16:
            b = TensorHandle(_bf16_bits_to_fp32(b.data), tl.float32)
        return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    cast_impl._bf16_patched = True
    InterpreterBuilder.cast_impl = cast_impl
    InterpreterBuilder.create_dot = create_dot
