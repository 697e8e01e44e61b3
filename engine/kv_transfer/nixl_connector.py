"""KV transfer on NIXL (https://github.com/ai-dynamo/nixl) with its UCX backend.

Host memory on a CPU replica, device memory on a GPU one: the same calls; UCX picks shared memory or TCP between
processes of one machine and NVLink or RDMA between GPUs. The KV pool is registered once at start-up, and the list of
runs of consecutive blocks move as one descriptor per layer's key or value (KVLayout).
"""

from __future__ import annotations

import base64
import importlib
import logging
import uuid
from types import ModuleType
from typing import Any

from engine.kv_cache import KVCache
from engine.kv_transfer.connector import IncompatibleEngine, KVTransferError, TransferSize, TransferState
from engine.kv_transfer.layout import KVLayout, runs

logger = logging.getLogger(__name__)

# `nixl` is NVIDIA's meta package (it picks a build for the CUDA it finds); nixl-cu12 / nixl-cu13 are the builds.
_MODULES = ("nixl._api", "nixl_cu13._api", "nixl_cu12._api")


def load_nixl() -> ModuleType:
    for name in _MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise KVTransferError("NIXL is not installed: pip install nixl-cu12 (or nixl-cu13), or .[disagg]")


class NixlTransfer:
    def __init__(self, agent: Any, handle: Any, size: TransferSize) -> None:
        self._agent = agent
        self._handle = handle
        self.size = size

    def state(self) -> TransferState:
        state = self._agent.check_xfer_state(self._handle)
        return {"DONE": TransferState.DONE, "PROC": TransferState.RUNNING}.get(state, TransferState.FAILED)

    def release(self) -> None:
        self._agent.release_xfer_handle(self._handle)


class NixlConnector:
    def __init__(self, kv_cache: KVCache, block_size: int) -> None:
        api = load_nixl()
        self.engine_id = uuid.uuid4().hex
        self.layout = KVLayout.of(kv_cache, block_size)
        # No progress thread: NIXL's spins a whole core, the one the engine's forward needs (a replica on a shared
        # host, or pinned to one core). UCX progresses instead whenever we poll a read or the notifications.
        config = api.nixl_agent_config(enable_prog_thread=False, backends=["UCX"])
        self._agent = api.nixl_agent(self.engine_id, config)
        regions = [(address, size, self.layout.device_id, "") for address, size in self.layout.regions]
        self._registered = self._agent.get_reg_descs(regions, self.layout.memory)
        self._agent.register_memory(self._registered)
        self._metadata = {
            "engine_id": self.engine_id,
            "agent_metadata": base64.b64encode(self._agent.get_agent_metadata()).decode(),
            "layout": self.layout.to_json(),
        }
        self._remotes: dict[str, KVLayout] = {}  # engine id -> its pool's layout
        logger.info(
            "KV transfer: NIXL agent %s registered %d regions (%d blocks of %d bytes each, %s)",
            self.engine_id, len(self.layout.regions), self.layout.num_blocks, self.layout.block_bytes,
            self.layout.memory,
        )  # fmt: skip

    def metadata(self) -> dict[str, Any]:
        return self._metadata

    def knows(self, engine_id: str) -> bool:
        return engine_id in self._remotes

    def add_remote(self, metadata: dict[str, Any]) -> None:
        try:
            engine_id = metadata["engine_id"]
            layout = KVLayout.from_json(metadata["layout"])
            agent_metadata = base64.b64decode(metadata["agent_metadata"])
        except (KeyError, TypeError, ValueError) as exc:
            raise KVTransferError(f"malformed KV transfer metadata: {exc!r}") from None
        mismatch = self.layout.mismatch(layout)
        if mismatch is not None:
            raise IncompatibleEngine(f"engine {engine_id}'s KV pool does not match ours: {mismatch}")
        if self._agent.add_remote_agent(agent_metadata).decode() != engine_id:
            raise KVTransferError(f"engine {engine_id}'s metadata names another agent")
        self._remotes[engine_id] = layout

    def read(
        self, engine_id: str, remote_block_ids: list[int], local_block_ids: list[int], notify: str
    ) -> NixlTransfer:
        remote = self._remotes[engine_id]
        local_firsts, remote_firsts, lengths = runs(local_block_ids, remote_block_ids)
        local_rows = self.layout.descriptors(local_firsts, lengths)
        size = TransferSize(len(local_block_ids), int(local_rows[:, 1].sum()), len(local_rows))
        try:
            handle = self._agent.initialize_xfer(
                "READ",
                self._agent.get_xfer_descs(local_rows, self.layout.memory),
                self._agent.get_xfer_descs(remote.descriptors(remote_firsts, lengths), remote.memory),
                engine_id,
                notify.encode(),
            )
        except Exception as exc:  # noqa: BLE001 - NIXL raises its own error types; any is a failed transfer
            raise KVTransferError(f"NIXL could not prepare the read: {exc}") from None
        if self._agent.transfer(handle) == "ERR":
            self._agent.release_xfer_handle(handle)
            raise KVTransferError("NIXL refused to post the read")
        return NixlTransfer(self._agent, handle, size)

    def notify(self, engine_id: str, message: str) -> None:
        self._agent.send_notif(engine_id, message.encode())

    def take_notifications(self) -> list[str]:
        return [message.decode() for messages in self._agent.get_new_notifs().values() for message in messages]

    def close(self) -> None:
        for engine_id in self._remotes:
            self._agent.remove_remote_agent(engine_id)
        self._remotes.clear()
        self._agent.deregister_memory(self._registered)
