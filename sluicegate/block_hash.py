"""Prefix block hashing: the contract the gateway and the engine share bit for bit (docs/architecture.md,
"Block hashing").

    h(-1) = xxh3_64(b"sluicegate/v1" + cache_salt.encode())
    h(i)  = xxh3_64(h(i-1).to_bytes(8, "little") + token_ids_of_block_i as uint32 little-endian)

Only full blocks are hashed. A hash names a block *and its whole prefix*, so two requests that share the hash of
block i share blocks 0..i. Torch-free on purpose: the gateway imports this without torch.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import xxhash

DEFAULT_BLOCK_SIZE = 16
_ROOT_PREFIX = b"sluicegate/v1"

# array("I") is 4 bytes on every platform we support; tobytes() is native order, so swap on big-endian hosts.
_NEEDS_BYTESWAP = array("I", [1]).tobytes() != (1).to_bytes(4, "little")


def root_hash(cache_salt: str = "") -> int:
    """h(-1): the parent of block 0. A salt gives a tenant a chain no other tenant can match."""
    return xxhash.xxh3_64_intdigest(_ROOT_PREFIX + cache_salt.encode())


def _token_bytes(token_ids: Sequence[int]) -> bytes:
    block = array("I", token_ids)
    if _NEEDS_BYTESWAP:
        block.byteswap()
    return block.tobytes()


def next_block_hash(parent_hash: int, block_token_ids: Sequence[int]) -> int:
    """h(i) from h(i-1) and the block's token ids (uint32 little-endian)."""
    return xxhash.xxh3_64_intdigest(parent_hash.to_bytes(8, "little") + _token_bytes(block_token_ids))


def block_hashes(
    token_ids: Sequence[int],
    block_size: int = DEFAULT_BLOCK_SIZE,
    cache_salt: str = "",
    parent_hash: int | None = None,
) -> list[int]:
    """Hashes of every *full* block of token_ids, chained from parent_hash (default: the salted root)."""
    h = root_hash(cache_salt) if parent_hash is None else parent_hash
    hashes = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        h = next_block_hash(h, token_ids[start : start + block_size])
        hashes.append(h)
    return hashes
