"""The interface KV transfer goes through. NixlConnector (nixl_connector.py) implements it on NIXL, the library vLLM,
Dynamo and llm-d move KV with; the rest of the engine sees only this.

A connector belongs to one replica and is used from its event loop only (NIXL agents are not thread-safe as we
create them). Each side registers its KV pool once; a decode replica learns a prefill replica from its metadata
(GET /v1/kv_transfer/metadata) and then reads blocks from it; a read carries a notification, which tells the prefill
replica it may free the blocks it held.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol


class KVTransferError(Exception):
    """A transfer could not start or failed; the decode replica computes the prompt itself instead."""


class IncompatibleEngine(KVTransferError):
    """The remote pool cannot exchange blocks with ours (another model, dtype or block size)."""


class TransferState(Enum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class TransferSize:
    num_blocks: int
    num_bytes: int
    num_descriptors: int


class Transfer(Protocol):
    size: TransferSize

    def state(self) -> TransferState:
        """Polled: never blocks."""

    def release(self) -> None:
        """Free the handle once the state is DONE or FAILED."""


class KVConnector(Protocol):
    engine_id: str

    def metadata(self) -> dict[str, Any]:
        """What a decode replica needs to read from this one (JSON-ready)."""

    def knows(self, engine_id: str) -> bool: ...

    def add_remote(self, metadata: dict[str, Any]) -> None:
        """Learn a prefill replica; KVTransferError if its pool cannot exchange blocks with ours."""

    def read(self, engine_id: str, remote_block_ids: list[int], local_block_ids: list[int], notify: str) -> Transfer:
        """Start reading remote blocks into local ones; `notify` reaches the remote side when the read is done."""

    def notify(self, engine_id: str, message: str) -> None:
        """Send a notification without a transfer (nothing to read: the remote side may free its blocks)."""

    def take_notifications(self) -> list[str]:
        """Notifications received since the last call (prefill side: handoffs that were read)."""

    def close(self) -> None: ...
