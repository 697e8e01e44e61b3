"""`sluicegate gateway` on the command line: its flags override the config file's values, and it says where it
listens."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import yaml

from tests.gateway.conftest import gateway_config
from tests.gateway.test_concurrency import _wait_ready


def test_port_zero_on_the_command_line_picks_a_free_port(tokenizer_dir, tmp_path):
    """`--port 0` overrides the config's port as any other value does (it once fell back to the config's 8000), and
    the gateway names the port it bound at the default log level (uvicorn says nothing there)."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # the config's port is held by someone else
    config = gateway_config(["http://127.0.0.1:9"], tokenizer_dir) | {"port": taken.getsockname()[1]}
    config_path = tmp_path / "gateway.yaml"
    config_path.write_text(yaml.safe_dump(config))
    gateway = subprocess.Popen(
        [sys.executable, "-m", "sluicegate.cli", "gateway", "--config", str(config_path), "--port", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(60, gateway.kill)  # a gateway that never says it is listening fails, not hangs
    watchdog.start()
    try:
        url, said = "", ""
        for line in gateway.stderr:
            if line.startswith("sluicegate gateway: listening on http://"):
                url, said = line.split()[4], line
                break
        assert "models: " in said and "quotas: in this process" in said, said
        port = int(url.rsplit(":", 1)[1])
        assert port not in (0, taken.getsockname()[1])
        _wait_ready(url, gateway)
    finally:
        watchdog.cancel()
        taken.close()
        gateway.terminate()
        gateway.wait(timeout=30)
        gateway.stderr.close()
