"""Pick the kernel implementations for a device: `get_attention_ops("cuda")` -> Triton, otherwise the torch
references. Every op has the reference's signature, so callers never branch on the backend.

Importing this module needs neither triton nor a GPU: the Triton modules load only when that backend is chosen.
Under TRITON_INTERPRET=1 (set before triton is imported) backend="triton" also runs on CPU tensors, which is how the
kernels are tested without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

BACKENDS = ("auto", "torch", "triton")


@dataclass(frozen=True)
class AttentionOps:
    """The kernel set one engine uses. Signatures: kernels/reference.py and kernels/reference_norm_rope.py."""

    backend: str  # "torch", "batch_invariant" or "triton"
    write_kv_cache: Callable
    paged_decode_attention: Callable
    paged_prefill_attention: Callable
    rms_norm: Callable
    add_rms_norm: Callable
    apply_rotary: Callable


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def get_attention_ops(device_type: str, backend: str = "auto", batch_invariant: bool = False) -> AttentionOps:
    """device_type: a torch device type ("cuda", "cpu", ...). backend: "auto" (Triton on CUDA when triton is
    installed, torch otherwise), "torch", or "triton" (CUDA, or any device under TRITON_INTERPRET=1).
    batch_invariant: torch attention whose every row is bit-identical whatever shares its step (kernels/
    batch_invariant.py), CPU only: neither the Triton kernels nor cuBLAS are made so here."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: use one of {BACKENDS}")
    if batch_invariant:
        if device_type != "cpu" or backend == "triton":
            raise ValueError(f"batch_invariant runs on CPU with the torch kernels, not {device_type!r} / {backend!r}")
        return _torch_ops(invariant=True)
    if backend == "auto":
        backend = "triton" if device_type == "cuda" and triton_available() else "torch"
    if backend == "torch":
        return _torch_ops()
    if not triton_available():
        raise ValueError("backend='triton' needs the triton package; install it or use backend='torch'")
    ops = _triton_ops()
    if device_type != "cuda" and not _kernels_interpreted():
        raise ValueError(
            f"backend='triton' on device {device_type!r} needs TRITON_INTERPRET=1 set before the kernels are "
            "imported; use backend='torch' there"
        )
    return ops


def _torch_ops(invariant: bool = False) -> AttentionOps:
    from kernels import batch_invariant, reference, reference_norm_rope

    attention = batch_invariant if invariant else reference
    return AttentionOps(
        backend="batch_invariant" if invariant else "torch",
        write_kv_cache=reference.write_kv_cache,
        paged_decode_attention=attention.paged_decode_attention,
        paged_prefill_attention=attention.paged_prefill_attention,
        rms_norm=reference_norm_rope.rms_norm,
        add_rms_norm=reference_norm_rope.add_rms_norm,
        apply_rotary=reference_norm_rope.apply_rotary,
    )


def _kernels_interpreted() -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    from kernels import triton_decode

    return isinstance(triton_decode._decode_partition_kernel, InterpretedFunction)


def _triton_ops() -> AttentionOps:
    from kernels import triton_cache, triton_decode, triton_norm_rope, triton_prefill

    return AttentionOps(
        backend="triton",
        write_kv_cache=triton_cache.write_kv_cache,
        paged_decode_attention=triton_decode.paged_decode_attention,
        paged_prefill_attention=triton_prefill.paged_prefill_attention,
        rms_norm=triton_norm_rope.rms_norm,
        add_rms_norm=triton_norm_rope.add_rms_norm,
        apply_rotary=triton_norm_rope.apply_rotary,
    )
