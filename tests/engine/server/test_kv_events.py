"""The KV events feed against the prefix cache it describes: what the feed says is cached is what a prompt hits."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import httpx

from sluicegate.block_hash import block_hashes


async def eventually(predicate, what: str, timeout_s: float = 30.0) -> None:
    """Poll for an eventual state (the timeout only bounds a hang; it is not a latency assertion)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


class FeedReader:
    """Follows /v1/kv/events and applies it to a set of cached hashes, as a router would."""

    def __init__(self):
        self.snapshot: dict | None = None
        self.events: list[tuple[str, dict]] = []
        self.cached: set[int] = set()
        self._task: asyncio.Task | None = None

    @classmethod
    async def open(cls, client: httpx.AsyncClient) -> FeedReader:
        feed = cls()
        feed._task = asyncio.create_task(feed._read(client))
        await eventually(lambda: feed.snapshot is not None or feed._task.done(), "snapshot")
        assert feed.snapshot is not None
        return feed

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _read(self, client: httpx.AsyncClient) -> None:
        async with client.stream("GET", "/v1/kv/events", timeout=None) as response:
            name = None
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    self._apply(name, json.loads(line[6:]))

    @property
    def last_seq(self) -> int:
        return self.events[-1][1]["seq"] if self.events else self.snapshot["seq"]

    def _apply(self, name: str, data: dict) -> None:
        if name == "snapshot":
            self.snapshot = data
            self.cached = set(data["block_hashes"])
            return
        self.events.append((name, data))
        if name == "stored":
            self.cached.update(data["block_hashes"])
        elif name == "removed":
            self.cached.difference_update(data["block_hashes"])
        else:
            self.cached.clear()


async def test_feed_predicts_the_second_prompts_hit(live_server):
    block_size = live_server.llm_engine.block_size
    async with httpx.AsyncClient(base_url=live_server.url, timeout=60) as client:
        feed = await FeedReader.open(client)
        try:
            assert feed.snapshot["block_size"] == block_size
            assert feed.snapshot["model"] == live_server.llm_engine.model_name
            prompt = [7 + (i * 37) % 500 for i in range(3 * block_size + 5)]  # 3 full blocks
            hashes = block_hashes(prompt, block_size)
            first = (await client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1})).json()
            assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
            await eventually(lambda: set(hashes) <= feed.cached, "stored events for the prompt's blocks")
            second = (await client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1})).json()
            predicted = block_size * next((i for i, h in enumerate(hashes) if h not in feed.cached), len(hashes))
            assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == predicted == 3 * block_size

            seqs = [data["seq"] for _, data in feed.events]
            assert seqs == list(range(feed.snapshot["seq"] + 1, feed.snapshot["seq"] + 1 + len(seqs)))

            # A later subscriber's snapshot is exactly the first feed's state at the snapshot's sequence number.
            late = await FeedReader.open(client)
            try:
                await eventually(lambda: feed.last_seq >= late.snapshot["seq"], "first feed catching up")
                assert feed.last_seq == late.snapshot["seq"]
                assert set(late.snapshot["block_hashes"]) == feed.cached
            finally:
                await late.close()
        finally:
            await feed.close()


async def test_salted_prompts_store_salted_hashes(live_server):
    block_size = live_server.llm_engine.block_size
    async with httpx.AsyncClient(base_url=live_server.url, timeout=60) as client:
        feed = await FeedReader.open(client)
        try:
            prompt = [11 + (i * 13) % 400 for i in range(2 * block_size)]
            body = {"prompt": prompt, "max_tokens": 1, "cache_salt": "tenant-7"}
            assert (await client.post("/v1/completions", json=body)).status_code == 200
            salted = block_hashes(prompt, block_size, cache_salt="tenant-7")
            await eventually(lambda: set(salted) <= feed.cached, "salted hashes stored")
            assert not set(block_hashes(prompt, block_size)) & feed.cached
        finally:
            await feed.close()
