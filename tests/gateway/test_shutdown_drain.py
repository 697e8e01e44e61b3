"""`sluicegate gateway` on SIGTERM: requests in flight get `drain_timeout_s` to finish; a stream still open then ends
with an error event the client can read (it was cut mid-chunk, with a traceback per stream and no access-log line),
and the process exits."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
import yaml

from tests.gateway.conftest import Admin, gateway_config
from tests.gateway.servers import ThreadServer, free_port
from tests.gateway.slow_upstream import SlowUpstream
from tests.gateway.test_concurrency import _wait_ready

CHAT = ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
RESPONSES = ("/v1/responses", {"input": "hi"})


def _cut_error(endpoint: str, last_event: dict) -> dict:
    """The error the stream ended with: a chat error event, or the failed response of a Responses stream."""
    if endpoint == RESPONSES[0]:
        assert last_event["type"] == "response.failed", last_event
        return last_event["response"]["error"]
    return last_event["error"]


@pytest.mark.parametrize(("endpoint", "fields"), [CHAT, RESPONSES], ids=["chat", "responses"])
def test_sigterm_ends_a_long_stream_with_an_error_event_after_the_drain(tokenizer_dir, tmp_path, endpoint, fields):
    upstream = SlowUpstream(["tok "] * 400, delay_s=0.05)  # ~20 s of stream: far past the drain
    with ThreadServer(upstream.app) as up:
        config_path = tmp_path / "gateway.yaml"
        config_path.write_text(yaml.safe_dump(gateway_config([up.url], tokenizer_dir, drain_timeout_s=1)))
        port = free_port()
        gateway = subprocess.Popen(
            [sys.executable, "-m", "sluicegate.cli", "gateway", "--config", str(config_path), "--port", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(url, gateway)
            admin = Admin(url)
            key = admin.key(admin.tenant())
            body = {"model": "tiny", **fields, "stream": True}
            events: list[str] = []
            started = threading.Event()

            def read_stream() -> None:
                headers = {"authorization": f"Bearer {key}"}
                with httpx.stream("POST", url + endpoint, json=body, headers=headers, timeout=30) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: "):
                            events.append(line[6:])
                            started.set()

            reader = threading.Thread(target=read_stream)
            reader.start()
            assert started.wait(30)
            sent_s = time.monotonic()
            gateway.send_signal(signal.SIGTERM)
            reader.join(30)
            assert not reader.is_alive()
            assert gateway.wait(timeout=30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
            assert 0.9 < time.monotonic() - sent_s < 15  # the drain, not the stream, decided when it ended
            error = _cut_error(endpoint, json.loads(events[-1]))
            assert error["code"] == "service_unavailable" and "shutting down" in error["message"]
            assert len(events) > 2 and upstream.finished == 0
            stdout, stderr = gateway.communicate(timeout=10)
            access = [json.loads(line) for line in stdout.splitlines() if line.startswith(b"{")]
            lines = [a for a in access if "request_id" in a and a.get("model") == "tiny"]  # not the audit log's
            assert len(lines) == 1 and lines[0]["stream"] and lines[0]["completion_tokens"] > 0, stdout[-2000:]
            assert b"Traceback" not in stderr, stderr[-2000:]
        finally:
            if gateway.poll() is None:
                gateway.kill()
                gateway.wait(timeout=10)
