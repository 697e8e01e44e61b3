"""One attention interface for the model, whatever computes it.

The model runner orders each step's flattened batch as [decode tokens | prefill-chunk tokens]: the first
`num_decodes` sequences have exactly one query token (paged decode kernel), the rest are prefill chunks (paged
prefill kernel, which reads the cached prefix and the chunk itself from the cache). New K/V are written into their
slots first, so neither kernel needs a copy of the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] int64
    num_decodes: int  # decode sequences (= decode tokens), first in the batch
    decode_block_tables: torch.Tensor  # [num_decodes, M] int32
    decode_seq_lens: torch.Tensor  # [num_decodes] int32, context including the new token
    prefill_block_tables: torch.Tensor  # [P, M] int32
    prefill_seq_lens: torch.Tensor  # [P] int32
    prefill_query_start_loc: torch.Tensor  # [P + 1] int32, relative to the first prefill token
    num_prefills: int


class PagedAttention:
    """Backend-agnostic paged attention for one layer call. `ops` provides write_kv_cache,
    paged_decode_attention and paged_prefill_attention with kernels/reference.py's signatures."""

    def __init__(self, ops, scale: float):
        self.ops = ops
        self.scale = scale

    def __call__(
        self,
        q: torch.Tensor,  # [T, Hq, D]
        k: torch.Tensor,  # [T, Hkv, D]
        v: torch.Tensor,  # [T, Hkv, D]
        key_cache: torch.Tensor,  # [N, B, Hkv, D]
        value_cache: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        self.ops.write_kv_cache(k, v, key_cache, value_cache, meta.slot_mapping)
        nd = meta.num_decodes
        if meta.num_prefills == 0:
            return self.ops.paged_decode_attention(
                q, key_cache, value_cache, meta.decode_block_tables, meta.decode_seq_lens, self.scale
            )
        prefill_out = self.ops.paged_prefill_attention(
            q[nd:],
            key_cache,
            value_cache,
            meta.prefill_block_tables,
            meta.prefill_query_start_loc,
            meta.prefill_seq_lens,
            self.scale,
        )
        if nd == 0:
            return prefill_out
        decode_out = self.ops.paged_decode_attention(
            q[:nd], key_cache, value_cache, meta.decode_block_tables, meta.decode_seq_lens, self.scale
        )
        return torch.cat([decode_out, prefill_out], dim=0)


def attention_ops(device: torch.device, backend: str, batch_invariant: bool = False):
    """Triton kernels on CUDA (or when asked), the torch reference elsewhere; batch_invariant: the CPU kernels whose
    rows do not depend on what shares their step (kernels/batch_invariant.py)."""
    try:
        from kernels.dispatch import get_attention_ops
    except ImportError:
        pass
    else:
        return get_attention_ops(device.type, backend, batch_invariant)
    if backend == "triton":
        raise ValueError("attention_backend='triton' needs kernels.dispatch (Triton kernels), which is unavailable")
    from kernels import batch_invariant as invariant
    from kernels import reference

    return invariant if batch_invariant else reference
