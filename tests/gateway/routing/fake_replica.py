"""A replica's control plane on loopback for the router tests: /health, /metrics and /v1/kv/events
(docs/architecture.md format).

Not an engine: it serves no completions. A real Starlette app under uvicorn in its own thread, so the router talks
to it over real HTTP and SSE. The test drives it from its own thread (store / remove / clear / skip a sequence
number / cut connections / go unhealthy); each feed connection polls the shared event log.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route


class FakeReplica:
    def __init__(self, block_size: int = 16, hash_format: str = "int") -> None:
        self.block_size = block_size
        self.hash_format = hash_format  # "int" or "hex": how hashes are written in the JSON
        self.healthy = True
        self.waiting_requests = 0
        self.kv_usage = 0.0
        self.feed_connections = 0
        self._lock = threading.Lock()
        self._blocks: set[int] = set()
        self._seq = 0
        self._log: list[tuple[int, str, list[int]]] = []  # (seq, kind, hashes) after each connection's snapshot
        self._epoch = 0  # bumped to cut every open feed connection
        self._silent_epoch = -1  # connections of this epoch hang instead of closing
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # -- test controls (any thread) ---------------------------------------------------------------------------------

    def store(self, hashes: list[int]) -> None:
        self._append("stored", hashes, lambda: self._blocks.update(hashes))

    def remove(self, hashes: list[int]) -> None:
        self._append("removed", hashes, lambda: self._blocks.difference_update(hashes))

    def clear(self) -> None:
        self._append("cleared", [], self._blocks.clear)

    def skip_seq(self) -> None:
        """Lose one event on the wire: the next event's number jumps by two."""
        with self._lock:
            self._seq += 1

    def cut_connections(self) -> None:
        with self._lock:
            self._epoch += 1

    def silence_connections(self) -> None:
        """The open feed connections go quiet without closing, not even keep-alives (a host cut off by the network);
        new connections are served as usual."""
        with self._lock:
            self._silent_epoch = self._epoch
            self._epoch += 1

    # -- server ------------------------------------------------------------------------------------------------------

    def start(self) -> FakeReplica:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(self._app(), log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake replica did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self.cut_connections()
            self._server.should_exit = True
            self._thread.join(timeout=5)

    def _append(self, kind: str, hashes: list[int], mutate) -> None:
        with self._lock:
            mutate()
            self._seq += 1
            self._log.append((self._seq, kind, list(hashes)))

    def _encode(self, hashes) -> list:
        return [hex(h) for h in hashes] if self.hash_format == "hex" else list(hashes)

    def _app(self) -> Starlette:
        async def health(request: Request) -> Response:
            return PlainTextResponse("ok", status_code=200 if self.healthy else 503)

        async def metrics(request: Request) -> Response:
            body = (
                "# TYPE vllm:num_requests_waiting gauge\n"
                f'vllm:num_requests_waiting{{model_name="m"}} {self.waiting_requests}\n'
                "# TYPE vllm:kv_cache_usage_perc gauge\n"
                f'vllm:kv_cache_usage_perc{{model_name="m"}} {self.kv_usage}\n'
            )
            return PlainTextResponse(body)

        async def events(request: Request) -> Response:
            with self._lock:
                epoch = self._epoch
                cursor = len(self._log)
                snapshot = {"seq": self._seq, "block_size": self.block_size, "block_hashes": self._encode(self._blocks)}
                self.feed_connections += 1

            async def stream():
                nonlocal cursor
                yield f"event: snapshot\ndata: {json.dumps(snapshot)}\n\n"
                idle_polls = 0
                while True:
                    with self._lock:
                        silent = epoch == self._silent_epoch
                        if self._epoch != epoch and not silent:
                            return
                        new = self._log[cursor:]
                        cursor = len(self._log)
                    if silent:
                        await asyncio.sleep(0.05)
                        continue
                    for seq, kind, hashes in new:
                        data = json.dumps({"seq": seq, "block_hashes": self._encode(hashes)})
                        yield f"event: {kind}\ndata: {data}\n\n"
                    idle_polls = 0 if new else idle_polls + 1
                    if idle_polls % 50 == 49:
                        yield ": keep-alive\n\n"
                    await asyncio.sleep(0.01)

            return StreamingResponse(stream(), media_type="text/event-stream")

        return Starlette(routes=[Route("/health", health), Route("/metrics", metrics), Route("/v1/kv/events", events)])
