"""Processes for the end-to-end routing benchmark: engine replicas and a gateway, each a `sluicegate` subprocess."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Proc:
    """A `sluicegate ...` subprocess listening on `url`; its stderr goes to a log file for post-mortems."""

    def __init__(self, args: list[str], port: int, log_path: Path, core: int | None = None, env=None) -> None:
        """`core`: pin the process to that CPU; `env`: its environment (default: this one's)."""
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._log = open(log_path, "wb")
        pin = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sluicegate.cli", *args], stdout=subprocess.DEVNULL, stderr=self._log, env=env,
            preexec_fn=pin,
        )  # fmt: skip

    def wait_healthy(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.url} exited with {self.process.returncode}; see {self.log_path}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.url} not healthy after {timeout_s} s; see {self.log_path}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def start_engine(model_dir: str, served_name: str, num_kv_blocks: int, workdir: Path, index: int) -> Proc:
    port = free_port()
    args = [
        "engine",
        "--model",
        model_dir,
        "--port",
        str(port),
        "--served-model-name",
        served_name,
        "--num-kv-blocks",
        str(num_kv_blocks),
        "--log-level",
        "warning",
    ]
    return Proc(args, port, workdir / f"engine{index}.log")


def start_gateway(
    model_dir: str,
    served_name: str,
    replica_urls: list[str],
    policy: str,
    api_key: str,
    workdir: Path,
    kv_events: bool = True,
) -> Proc:
    port = free_port()
    tenants = {
        "tenants": [
            {
                "id": "bench",
                "rpm": 10**9,
                "input_tpm": 10**12,
                "output_tpm": 10**12,
                "models": [served_name],
                "keys": [{"name": "bench", "key": api_key}],
            }
        ]
    }
    (workdir / "tenants.yaml").write_text(yaml.safe_dump(tenants))
    config = {
        "host": "127.0.0.1",
        "port": port,
        "tenants_seed": str(workdir / "tenants.yaml"),
        "router": "gateway.routing.factory:build_router",
        "models": {
            served_name: {
                "tokenizer": model_dir,
                "replicas": [{"name": f"r{i}", "url": url} for i, url in enumerate(replica_urls)],
                "routing": {"policy": policy, "kv_events": kv_events},
                "health": {"interval_s": 0.5},
            }
        },
    }
    config_path = workdir / f"gateway-{policy}.yaml"
    config_path.write_text(yaml.safe_dump(config))
    return Proc(["gateway", "--config", str(config_path)], port, workdir / f"gateway-{policy}.log")
