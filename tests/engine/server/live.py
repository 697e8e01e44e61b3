"""A real replica on loopback for tests: an LLMEngine on a tiny model, the server under uvicorn in a thread."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import uvicorn

from engine.config import EngineConfig
from engine.server.app import create_app
from engine.server.cli import ReplicaServer
from engine.server.config import ServerConfig

START_TIMEOUT_S = 120.0


def make_engine(model_dir: str, **engine_kwargs):
    from engine.llm_engine import LLMEngine

    return LLMEngine(EngineConfig(model=model_dir, **{"num_kv_blocks": 512, "max_num_seqs": 16, **engine_kwargs}))


class LiveServer:
    """`server` is a ReplicaServer (the CLI's, exits on engine death) or, with `on_fatal`, a plain uvicorn.Server
    around create_app, so a test can watch a dead replica that has not exited."""

    def __init__(self, llm_engine, on_fatal=None, **server_kwargs):
        self.llm_engine = llm_engine
        config = ServerConfig(port=0, log_level="warning", **server_kwargs)
        if on_fatal is None:
            self.server = ReplicaServer(llm_engine, config)
            self.app = self.server.app
        else:
            self.app = create_app(llm_engine, config, on_fatal=on_fatal)
            self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="on"))
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self.exit_code: int | None = None
        self.http = httpx.Client(base_url=self.url, timeout=60)  # one client: each new one costs an SSL context
        self.thread = threading.Thread(target=self._run, name="test-uvicorn", daemon=True)

    @property
    def replica(self):
        return self.app.state.replica

    def _run(self) -> None:
        self.server.run(sockets=[self._socket])
        self.exit_code = getattr(self.server, "exit_code", 0)

    def start(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("test server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(60)
        self._socket.close()
        self.http.close()

    def metric(self, name: str) -> float:
        """The value of one unlabelled-or-model-labelled sample in /metrics (0 when absent)."""
        text = self.http.get("/metrics").text
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


def wait_until(predicate, timeout_s: float = 30.0, what: str = "condition", interval_s: float = 0.02) -> None:
    """Poll for an eventual state (not a latency assertion: the timeout only bounds a hang)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval_s)
