"""`sluicegate gateway` on the command line: its flags override the config file's values."""

from __future__ import annotations

import socket
import subprocess
import sys

import yaml

from tests.gateway.conftest import gateway_config
from tests.gateway.test_concurrency import _wait_ready


def test_port_zero_on_the_command_line_picks_a_free_port(tokenizer_dir, tmp_path):
    """`--port 0` overrides the config's port as any other value does (it once fell back to the config's 8000)."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # the config's port is held by someone else
    config = gateway_config(["http://127.0.0.1:9"], tokenizer_dir) | {"port": taken.getsockname()[1]}
    config_path = tmp_path / "gateway.yaml"
    config_path.write_text(yaml.safe_dump(config))
    gateway = subprocess.Popen(
        [sys.executable, "-m", "sluicegate.cli", "gateway", "--config", str(config_path), "--port", "0"]
        + ["--log-level", "info"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = ""
        for line in gateway.stderr:  # uvicorn names the port it bound
            if "running on http://" in line:
                url = line.split("running on ")[1].split()[0]
                break
        port = int(url.rsplit(":", 1)[1])
        assert port not in (0, taken.getsockname()[1])
        _wait_ready(url, gateway)
    finally:
        taken.close()
        gateway.terminate()
        gateway.wait(timeout=30)
        gateway.stderr.close()
