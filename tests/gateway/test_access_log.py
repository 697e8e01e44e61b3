"""The access log: one JSON line per finished completion request, refusals included, on `sluicegate.access`; who,
what, how long and how many tokens, never the prompt or the answer. A real gateway on loopback in front of an
upstream that echoes the prompt back, driven by the official openai client."""

from __future__ import annotations

import logging
import uuid

import httpx
import openai
import pytest

from gateway.access_log import ACCESS_LOGGER
from gateway.admin.audit import AUDIT_LOGGER
from tests.gateway.conftest import Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.echo_upstream import EchoUpstream
from tests.gateway.servers import ThreadServer
from tests.log_capture import captured

FIELDS = {
    "time",
    "request_id",
    "client_request_id",
    "tenant",
    "key_id",
    "key_name",
    "model",
    "replica",
    "prefill_replica",
    "status",
    "error",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "ttft_ms",
    "duration_ms",
    "stream",
}


@pytest.fixture(scope="module")
def echo():
    upstream = EchoUpstream()
    with ThreadServer(upstream.app) as server:
        yield server


@pytest.fixture(scope="module")
def gw(echo, tokenizer_dir):
    with serve_gateway(gateway_config([echo.url], tokenizer_dir)) as server:
        server.admin = Admin(server.url)
        yield server


def client(gw, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=30)


def test_a_streamed_request_is_one_line_without_its_text(gw):
    tenant = gw.admin.tenant()
    key = gw.admin.key(tenant, name="ci-key")
    secret = f"secret-{uuid.uuid4().hex}"
    with captured(ACCESS_LOGGER) as lines, captured(AUDIT_LOGGER, "", level=logging.DEBUG) as others:
        stream = client(gw, key).chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": f"please repeat {secret} back"}],
            max_tokens=20,
            stream=True,
            extra_headers={"x-request-id": "client-id-42"},
        )
        answer = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert secret in answer  # the echo upstream sent it back: the answer carried it through the gateway
        wait_until(lambda: any(r.get("tenant") == tenant for r in _access(lines)))
    (line,) = [r for r in _access(lines) if r["tenant"] == tenant]
    assert set(line) == FIELDS
    assert line["key_name"] == "ci-key" and line["key_id"].startswith("k_")
    assert line["model"] == "tiny" and line["replica"] and line["status"] == 200 and line["error"] is None
    assert line["stream"] is True and line["client_request_id"] == "client-id-42"
    assert line["request_id"].startswith("req-")
    assert line["prompt_tokens"] == 9 and line["completion_tokens"] == 4 and line["cached_tokens"] == 3
    assert 0 <= line["ttft_ms"] <= line["duration_ms"]
    assert line["time"].endswith("Z")
    assert others.lines  # the other loggers were heard (at debug level), and none of them carried the text either
    assert not [text for text in lines.lines + others.lines if secret in text]


def test_a_json_answer_is_logged_with_its_tokens(gw):
    tenant = gw.admin.tenant()
    key = gw.admin.key(tenant)
    with captured(ACCESS_LOGGER) as lines:
        answer = client(gw, key).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "one two three"}], max_tokens=20
        )
        assert answer.choices[0].message.content == "one two three"
        wait_until(lambda: any(r.get("tenant") == tenant for r in _access(lines)))
    (line,) = [r for r in _access(lines) if r["tenant"] == tenant]
    assert line["stream"] is False and line["status"] == 200
    assert (line["prompt_tokens"], line["completion_tokens"]) == (9, 3)
    assert line["client_request_id"] is None


def test_refusals_are_logged(gw):
    tenant = gw.admin.tenant(rpm=1)
    key = gw.admin.key(tenant)
    messages = [{"role": "user", "content": "hi"}]
    with captured(ACCESS_LOGGER) as lines:
        with pytest.raises(openai.AuthenticationError):
            client(gw, "sk-sg-not-a-key").chat.completions.create(model="tiny", messages=messages)
        with pytest.raises(openai.BadRequestError):
            client(gw, key).chat.completions.create(model="tiny", messages=messages, max_tokens=-1)
        client(gw, key).chat.completions.create(model="tiny", messages=messages, max_tokens=5)
        with pytest.raises(openai.RateLimitError):
            client(gw, key).chat.completions.create(model="tiny", messages=messages, max_tokens=5)
        wait_until(lambda: len(_access(lines)) >= 4)
    by_status = {r["status"]: r for r in _access(lines)}
    unauthorized, bad, ok, limited = by_status[401], by_status[400], by_status[200], by_status[429]
    assert unauthorized["tenant"] is None and unauthorized["error"] == "invalid_api_key"
    assert bad["tenant"] == tenant and bad["prompt_tokens"] == 0 and bad["replica"] is None
    assert bad["error"] == "invalid_request_error"  # no code: the error's type
    assert limited["tenant"] == tenant and limited["error"] == "rate_limit_exceeded" and limited["model"] == "tiny"
    assert ok["tenant"] == tenant
    assert all(r["ttft_ms"] is None for r in (unauthorized, bad, limited))


def test_access_log_off(echo, tokenizer_dir):
    with serve_gateway(gateway_config([echo.url], tokenizer_dir, access_log=False)) as server:
        admin = Admin(server.url)
        tenant = admin.tenant()
        key = admin.key(tenant)
        with captured(ACCESS_LOGGER) as lines:
            response = httpx.post(
                server.url + "/v1/chat/completions",
                headers={"authorization": f"Bearer {key}"},
                json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
            )
            assert response.status_code == 200
            unauthorized = httpx.post(server.url + "/v1/chat/completions", json={"model": "tiny"})
            assert unauthorized.status_code == 401
            wait_until(lambda: admin.usage(tenant)["requests"] == 1)  # settled: its line would have been written
        assert lines.lines == []


def _access(lines) -> list[dict]:
    return [r for r in lines.records() if "duration_ms" in r]
