"""`sluicegate gateway` keeps an idle client connection open past the clients' own idle expiry (httpx and the openai
client give one up after 5 s), so a client never sends a request on a connection the gateway is just closing: at
uvicorn's default of 5 s a test's admin client met "Server disconnected without sending a response" on CI."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import yaml

from gateway.cli import KEEP_ALIVE_S
from tests.gateway.conftest import gateway_config
from tests.gateway.servers import free_port
from tests.gateway.test_concurrency import _wait_ready

CLIENT_IDLE_EXPIRY_S = 5.0  # httpx's default keepalive_expiry, which the openai client keeps
HEALTH = b"GET /health HTTP/1.1\r\nHost: gateway\r\n\r\n"


def _answer(conn: socket.socket) -> bytes:
    conn.sendall(HEALTH)
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def test_an_idle_connection_outlives_the_clients_expiry(tokenizer_dir, tmp_path):
    assert KEEP_ALIVE_S > CLIENT_IDLE_EXPIRY_S
    config_path = tmp_path / "gateway.yaml"
    config_path.write_text(yaml.safe_dump(gateway_config(["http://127.0.0.1:9"], tokenizer_dir)))
    port = free_port()
    gateway = subprocess.Popen(
        [sys.executable, "-m", "sluicegate.cli", "gateway", "--config", str(config_path), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_ready(f"http://127.0.0.1:{port}", gateway)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            assert _answer(conn).startswith(b"HTTP/1.1 200")
            time.sleep(CLIENT_IDLE_EXPIRY_S + 1)  # idle past the client's expiry: uvicorn's default closed it by now
            assert _answer(conn).startswith(b"HTTP/1.1 200")
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
        gateway.stderr.close()
