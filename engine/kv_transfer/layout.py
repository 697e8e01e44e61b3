"""Where a replica's KV blocks live in memory, as the other side of a transfer needs to know it.

The pool is, per layer, a key and a value tensor of [num_blocks, block_size, kv_heads, head_dim] (engine/kv_cache.py):
2 x num_layers contiguous regions in which block b is the b-th slice of `block_bytes`. A transfer moves whole blocks;
blocks with consecutive ids on both sides (the common case: a prompt's blocks are allocated together) are one
contiguous range in each region, so a read takes one descriptor per (region, run of blocks), not per block: the
per-descriptor cost (a system call on a host, a work request on RDMA) is paid per run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from engine.kv_cache import KVCache


@dataclass(frozen=True)
class KVLayout:
    regions: tuple[tuple[int, int], ...]  # (address, bytes) of each layer's key tensor, then its value tensor
    num_blocks: int
    block_bytes: int
    block_size: int  # tokens per block
    dtype: str
    memory: str  # NIXL's memory kind: "DRAM" (host) or "VRAM" (a GPU)
    device_id: int

    @classmethod
    def of(cls, kv_cache: KVCache, block_size: int) -> KVLayout:
        regions = []
        for key_cache, value_cache in kv_cache.layers:
            for tensor in (key_cache, value_cache):
                assert tensor.is_contiguous()  # allocated so (kv_cache.py): a block is one slice of the region
                regions.append((tensor.data_ptr(), tensor.numel() * tensor.element_size()))
        first = kv_cache.layers[0][0]
        num_blocks = first.shape[0]
        return cls(
            regions=tuple(regions),
            num_blocks=num_blocks,
            block_bytes=regions[0][1] // num_blocks,
            block_size=block_size,
            dtype=str(first.dtype).removeprefix("torch."),
            memory="VRAM" if first.is_cuda else "DRAM",
            device_id=first.device.index or 0,
        )

    def descriptors(self, first_block_ids: np.ndarray, run_lengths: np.ndarray) -> np.ndarray:
        """NIXL's (address, bytes, device id) rows for runs of consecutive blocks in every region, region-major
        (the same order on both sides of a transfer)."""
        starts = np.array([address for address, _ in self.regions], dtype=np.uint64)
        block_bytes = np.uint64(self.block_bytes)
        rows = np.empty((len(self.regions) * first_block_ids.size, 3), dtype=np.uint64)
        rows[:, 0] = (starts[:, None] + first_block_ids.astype(np.uint64)[None, :] * block_bytes).reshape(-1)
        rows[:, 1] = np.tile(run_lengths.astype(np.uint64) * block_bytes, len(self.regions))
        rows[:, 2] = self.device_id
        return rows

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def mismatch(self, remote: KVLayout) -> str | None:
        """Why blocks cannot move between the two pools as they are, or None."""
        for name in ("block_bytes", "block_size", "dtype"):
            if getattr(self, name) != getattr(remote, name):
                return f"{name} {getattr(remote, name)} (remote) != {getattr(self, name)} (local)"
        if len(self.regions) != len(remote.regions):
            return f"{len(remote.regions) // 2} layers (remote) != {len(self.regions) // 2} (local)"
        return None

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> KVLayout:
        return cls(**{**value, "regions": tuple(tuple(r) for r in value["regions"])})


def runs(local_ids: list[int], remote_ids: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split a block-to-block mapping into runs consecutive on both sides: (local firsts, remote firsts, lengths)."""
    local, remote = np.asarray(local_ids, dtype=np.int64), np.asarray(remote_ids, dtype=np.int64)
    breaks = np.flatnonzero((np.diff(local) != 1) | (np.diff(remote) != 1)) + 1
    firsts = np.concatenate(([0], breaks))
    lengths = np.diff(np.concatenate((firsts, [local.size])))
    return local[firsts], remote[firsts], lengths
