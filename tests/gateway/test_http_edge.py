"""The HTTP edge: a path with a trailing slash is a 404 error object (not a redirect built from the Host header), the
console's bare /admin redirects to a path-only Location, and a body withheld past the deadline is a 408, not a
connection and a task held for as long as the client likes (found by a user trial, 2026-12-08)."""

from __future__ import annotations

import socket
import time

import httpx

from gateway import asgi


def test_a_trailing_slash_is_a_404_error_object_not_a_redirect(local_gateway):
    for path in ("/v1/chat/completions/", "/v1/embeddings/", "/health/", "/metrics/"):
        response = httpx.post(local_gateway.url + path, headers={"host": "evil.example"}, json={}, timeout=10)
        assert response.status_code in (404, 405), (path, response.status_code)
        assert "location" not in response.headers
        assert response.json()["error"]["message"]


def test_the_console_home_redirects_to_a_path_only_location(local_gateway):
    response = httpx.get(local_gateway.url + "/admin", headers={"host": "evil.example"}, timeout=10)
    assert response.status_code == 307
    assert response.headers["location"] == "/admin/"


def test_a_withheld_body_is_answered_408_at_the_deadline(local_gateway, monkeypatch):
    monkeypatch.setattr(asgi, "BODY_TIMEOUT_S", 0.5)
    key = local_gateway.admin.key(local_gateway.admin.tenant())
    port = int(local_gateway.url.rsplit(":", 1)[1])
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {key}\r\nContent-Length: 100\r\n\r\n"
    )
    started_s = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head.encode() + b'{"model":')  # 9 of the 100 bytes promised, then nothing
        answer = b""
        while not answer.rstrip().endswith(b"}"):
            chunk = conn.recv(4096)
            if not chunk:
                break
            answer += chunk
    assert time.monotonic() - started_s < 5
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b'"code":"timeout"' in answer.replace(b" ", b"")
