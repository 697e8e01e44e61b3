"""A redis-server of the test's own on a free port, which tests may kill, restart, pause and resume."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import redis

from tests.gateway.servers import free_port


class RedisProcess:
    def __init__(self, data_dir: str):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = data_dir
        self._proc: subprocess.Popen | None = None

    def start(self) -> RedisProcess:
        # append-only with fsync always: a SIGKILLed server comes back with its tenants and keys
        self._proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                self._dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        client.close()
        return self

    def kill(self) -> None:
        self._proc.kill()
        self._proc.wait()

    def pause(self) -> None:
        os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self._proc.pid, signal.SIGCONT)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            self.resume()
            self.kill()
