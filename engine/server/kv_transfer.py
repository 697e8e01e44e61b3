"""The replica's side of disaggregated serving, on the event loop (docs/architecture.md, "Disaggregated prefill and
decode"): a prefill replica answers with the `kv_transfer_params` of what it holds and frees it when read; a decode
replica reads it before adding the request. Every failure on the decode side ends in the same place: the request
is added without read blocks and computes its prompt here (the client sees latency, never an error).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx

from engine.kv_transfer.connector import IncompatibleEngine, KVConnector, KVTransferError, Transfer, TransferState
from engine.kv_transfer.params import Handoff, RemotePrefill
from engine.kv_transfer.planner import PullRefusal
from engine.kv_transfer.pull_plan import PullPlan
from engine.server.async_engine import AsyncEngine
from engine.server.kv_transfer_metrics import KVTransferMetrics

logger = logging.getLogger(__name__)

METADATA_PATH = "/v1/kv_transfer/metadata"
NOTIFICATION_POLL_S = 0.005  # prefill side: how soon a read handoff's blocks are freed
EXPIRY_CHECK_S = 1.0
READ_POLL_MAX_S = 0.001  # decode side: polling a read backs off to this
METADATA_TIMEOUT_S = 5.0


class KVTransferService:
    def __init__(
        self,
        connector: KVConnector,
        engine: AsyncEngine,
        metrics: KVTransferMetrics,
        role: str,
        advertised_host: str | None,
        read_timeout_s: float,
    ) -> None:
        self.connector = connector
        self.engine = engine
        self.metrics = metrics
        self.role = role
        self.advertised_host = advertised_host
        self.read_timeout_s = read_timeout_s
        self._http: httpx.AsyncClient | None = None
        self._tasks: set[asyncio.Task] = set()
        self._remote_locks: dict[str, asyncio.Lock] = {}

    async def start(self) -> None:
        self._http = httpx.AsyncClient(timeout=METADATA_TIMEOUT_S)
        if self.role == "prefill":
            self._spawn(self._free_read_handoffs())

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()
        self.connector.close()

    # -- prefill side -------------------------------------------------------------------------------------------
    def handoff_params(
        self, handoff: Handoff | None, request_id: str, local_address: tuple[str, int] | None
    ) -> dict[str, Any] | None:
        """The response's kv_transfer_params (None when there is nothing to hand over). The host is the one the
        gateway reached this replica on, unless --kv-transfer-host names another."""
        if handoff is None:
            return None
        host, port = local_address or ("127.0.0.1", 0)
        self.metrics.handoffs.inc()
        return RemotePrefill(
            engine_id=self.connector.engine_id,
            host=self.advertised_host or host,
            port=port,
            block_ids=handoff.block_ids,
            request_id=request_id,
            num_tokens=handoff.num_tokens,
            prefix_hash=handoff.prefix_hash,
        ).to_json()

    async def _free_read_handoffs(self) -> None:
        next_expiry_s = time.monotonic() + EXPIRY_CHECK_S
        while True:
            await asyncio.sleep(NOTIFICATION_POLL_S)
            read = self.connector.take_notifications()
            now_s = time.monotonic()
            if read or now_s >= next_expiry_s:
                self.engine.handoffs_read(read)
                next_expiry_s = now_s + EXPIRY_CHECK_S

    # -- decode side --------------------------------------------------------------------------------------------
    async def pull(self, prompt: list[int], cache_salt: str, remote: RemotePrefill) -> PullPlan | None:
        """Read the remote prompt blocks this replica lacks; the plan to add the request with, or None (compute
        the prompt here)."""
        try:
            await self._know(remote)
        except KVTransferError as exc:
            logger.warning("KV transfer: cannot use engine %s at %s: %s", remote.engine_id, remote.url, exc)
            self.metrics.fallback("incompatible" if isinstance(exc, IncompatibleEngine) else "metadata")
            return None
        plan = await self.engine.plan_pull(prompt, cache_salt, remote)
        if isinstance(plan, PullRefusal):
            self.metrics.fallback(plan.value)
            self._notify(remote)  # the prefill replica may free its blocks now rather than at its deadline
            return None
        self.metrics.blocks_cached.inc(plan.first_block)
        if not plan.read_blocks:
            self._notify(remote)
            return plan
        try:
            transfer = self.connector.read(
                remote.engine_id, list(remote.block_ids[plan.first_block : plan.num_blocks]), plan.read_block_ids,
                notify=remote.request_id,
            )  # fmt: skip
        except KVTransferError as exc:
            logger.warning("KV transfer from engine %s failed to start: %s", remote.engine_id, exc)
            self._failed(plan, remote, "transfer")
            return None
        return await self._wait(transfer, plan, remote)

    async def _wait(self, transfer: Transfer, plan: PullPlan, remote: RemotePrefill) -> PullPlan | None:
        started_s = time.monotonic()
        deadline_s = started_s + self.read_timeout_s
        poll_s = 0.0
        try:
            while (state := transfer.state()) is TransferState.RUNNING:
                if time.monotonic() > deadline_s:
                    break
                await asyncio.sleep(poll_s)
                poll_s = min(READ_POLL_MAX_S, poll_s * 2 or 0.0001)
        except asyncio.CancelledError:  # the client left: the blocks stay until the read ends
            self._spawn(self._settle(transfer, plan))
            raise
        if state is TransferState.RUNNING:
            logger.warning("KV transfer from engine %s timed out after %.1f s", remote.engine_id, self.read_timeout_s)
            self._spawn(self._settle(transfer, plan))
            self.metrics.failed_transfers.inc()
            self.metrics.fallback("timeout")
            return None
        transfer.release()
        if state is TransferState.FAILED:
            logger.warning("KV transfer from engine %s failed", remote.engine_id)
            self._failed(plan, remote, "transfer")
            return None
        self.metrics.xfer_time_s.observe(time.monotonic() - started_s)
        self.metrics.bytes_transferred.observe(transfer.size.num_bytes)
        self.metrics.num_descriptors.observe(transfer.size.num_descriptors)
        self.metrics.blocks_read.inc(transfer.size.num_blocks)
        return plan

    def _failed(self, plan: PullPlan, remote: RemotePrefill, reason: str) -> None:
        self.engine.cancel_pull(plan)
        self.metrics.failed_transfers.inc()
        self.metrics.fallback(reason)
        self._notify(remote)

    async def _settle(self, transfer: Transfer, plan: PullPlan) -> None:
        """A read given up on may still be writing into the plan's blocks: they go back only once it has ended."""
        while transfer.state() is TransferState.RUNNING:
            await asyncio.sleep(READ_POLL_MAX_S)
        transfer.release()
        self.engine.cancel_pull(plan)

    async def _know(self, remote: RemotePrefill) -> None:
        if self.connector.knows(remote.engine_id):
            return
        lock = self._remote_locks.setdefault(remote.engine_id, asyncio.Lock())
        async with lock:  # one metadata fetch per remote engine, however many requests wait for it
            if self.connector.knows(remote.engine_id):
                return
            assert self._http is not None  # start() made it
            try:
                answer = await self._http.get(remote.url + METADATA_PATH)
                answer.raise_for_status()
                metadata: dict[str, Any] = answer.json()
            except (httpx.HTTPError, ValueError) as exc:
                raise KVTransferError(f"GET {remote.url}{METADATA_PATH}: {exc!r}") from None
            if metadata.get("engine_id") != remote.engine_id:
                raise KVTransferError(f"{remote.url} is engine {metadata.get('engine_id')}, not {remote.engine_id}")
            self.connector.add_remote(metadata)

    def _notify(self, remote: RemotePrefill) -> None:
        if not self.connector.knows(remote.engine_id):
            return  # it never answered: its deadline frees the blocks
        try:
            self.connector.notify(remote.engine_id, remote.request_id)
        except Exception as exc:  # noqa: BLE001 - a lost notification only delays the remote side's free
            logger.debug("KV transfer: notifying engine %s failed: %s", remote.engine_id, exc)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
