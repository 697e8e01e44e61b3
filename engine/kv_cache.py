"""The preallocated KV-cache tensors (device pool and, for swap preemption, a host pool) and block copies."""

from __future__ import annotations

import logging

import torch

from engine.models.spec import ModelSpec

log = logging.getLogger(__name__)

DEFAULT_CPU_KV_BYTES = 512 << 20
CUDA_KV_FRACTION_OF_FREE = 0.85  # leave room for activations and CUDA graphs


def num_blocks_for_budget(spec: ModelSpec, block_size: int, dtype: torch.dtype, budget_bytes: int) -> int:
    bytes_per_block = spec.kv_bytes_per_token(dtype.itemsize) * block_size
    return max(0, budget_bytes // bytes_per_block)


def kv_budget_bytes(device: torch.device, requested: int | None) -> int:
    if requested is not None:
        return requested
    if device.type == "cuda":
        free_bytes, _ = torch.cuda.mem_get_info(device)
        return int(free_bytes * CUDA_KV_FRACTION_OF_FREE)
    return DEFAULT_CPU_KV_BYTES


class KVCache:
    """Per layer a (key, value) pair of [num_blocks, block_size, num_kv_heads, head_dim] tensors."""

    def __init__(
        self,
        spec: ModelSpec,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device,
        num_host_blocks: int = 0,
    ):
        shape = (num_blocks, block_size, spec.num_kv_heads, spec.head_dim)
        self.layers = [
            (torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
            for _ in range(spec.num_layers)
        ]
        host_shape = (num_host_blocks, *shape[1:])
        pin = device.type == "cuda"
        self.host_layers = [
            (torch.zeros(host_shape, dtype=dtype, pin_memory=pin), torch.zeros(host_shape, dtype=dtype, pin_memory=pin))
            for _ in range(spec.num_layers if num_host_blocks else 0)
        ]
        self.mirrors: list[KVCache] = []  # pools indexed by the same block ids (a draft model's), copied alongside
        bytes_per_token = spec.kv_bytes_per_token(dtype.itemsize)
        log.info(
            "KV cache: %d bytes per token (2 x %d layers x %d kv heads x %d head dim x %d bytes), %d blocks of %d "
            "tokens = %d tokens, %.1f MiB; %d host blocks for swapping",
            bytes_per_token, spec.num_layers, spec.num_kv_heads, spec.head_dim, dtype.itemsize,
            num_blocks, block_size, num_blocks * block_size, num_blocks * block_size * bytes_per_token / 2**20,
            num_host_blocks,
        )  # fmt: skip

    def copy_blocks(self, src_ids: list[int], dst_ids: list[int]) -> None:
        """Copy-on-write: duplicate whole blocks within the device pool."""
        src = torch.tensor(src_ids, device=self.layers[0][0].device)
        dst = torch.tensor(dst_ids, device=self.layers[0][0].device)
        for key_cache, value_cache in self.layers:
            key_cache[dst] = key_cache[src]
            value_cache[dst] = value_cache[src]
        for mirror in self.mirrors:
            mirror.copy_blocks(src_ids, dst_ids)

    def swap_out(self, device_ids: list[int], host_ids: list[int]) -> None:
        self._swap(self.layers, self.host_layers, device_ids, host_ids)

    def swap_in(self, host_ids: list[int], device_ids: list[int]) -> None:
        self._swap(self.host_layers, self.layers, host_ids, device_ids)

    @staticmethod
    def _swap(src_layers, dst_layers, src_ids: list[int], dst_ids: list[int]) -> None:
        src_index = torch.tensor(src_ids, device=src_layers[0][0].device)
        dst_index = torch.tensor(dst_ids, device=dst_layers[0][0].device)
        # Blocking copies: the device blocks are reused as soon as this returns, so the data must have landed.
        for (src_k, src_v), (dst_k, dst_v) in zip(src_layers, dst_layers):
            dst_k[dst_index] = src_k[src_index].to(dst_k.device)
            dst_v[dst_index] = src_v[src_index].to(dst_v.device)
