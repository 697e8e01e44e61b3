"""`x-request-id` on every gateway error, before auth and after, the client's own printable id echoed when it sent
one: read the way a client reads it, from the official openai client's APIStatusError.response.headers."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.gateway.conftest import ADMIN_TOKEN, Admin, gateway_config, serve_gateway
from tests.gateway.servers import free_port

CHAT = [{"role": "user", "content": "hello there"}]


def client(gw, key: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=30, default_headers=headers)


def error_of(call) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as caught:
        call()
    return caught.value


def test_openai_client_errors_carry_the_gateways_request_id(local_gateway):
    admin = local_gateway.admin
    key = admin.key(admin.tenant(rpm=1))
    create = client(local_gateway, key).chat.completions.create
    stranger = client(local_gateway, "sk-sg-wrong")
    errors = [
        (401, error_of(lambda: stranger.chat.completions.create(model="tiny", messages=CHAT))),
        (401, error_of(lambda: stranger.models.list())),
        (404, error_of(lambda: create(model="no-such-model", messages=CHAT))),
        (400, error_of(lambda: create(model="tiny", messages=CHAT, max_tokens=0))),
    ]
    create(model="tiny", messages=CHAT, max_tokens=2)
    errors.append((429, error_of(lambda: create(model="tiny", messages=CHAT, max_tokens=2))))
    seen = set()
    for status, error in errors:
        assert error.status_code == status
        request_id = error.response.headers.get("x-request-id")
        assert request_id and request_id.startswith("req-"), (status, dict(error.response.headers))
        seen.add(request_id)
    assert len(seen) == len(errors)  # one id per request


def test_the_clients_own_id_is_echoed(local_gateway):
    mine = "trace-me-0001"
    bad = client(local_gateway, "sk-sg-wrong", **{"x-request-id": mine})
    assert (
        error_of(lambda: bad.chat.completions.create(model="tiny", messages=CHAT)).response.headers["x-request-id"]
        == mine
    )
    assert error_of(lambda: bad.models.retrieve("tiny")).response.headers["x-request-id"] == mine
    unprintable = httpx.post(
        local_gateway.url + "/v1/chat/completions", headers={"x-request-id": "has space"}, json={"model": "tiny"}
    )
    assert unprintable.status_code == 401 and unprintable.headers["x-request-id"].startswith("req-")


def test_errors_outside_the_openai_routes_carry_one_too(local_gateway):
    url = local_gateway.url
    key = local_gateway.admin.key(local_gateway.admin.tenant())
    cases = [
        httpx.get(url + "/v1/chat/completions"),  # 405 on the fast path
        httpx.delete(url + "/v1/models"),  # 405 from the router
        httpx.get(url + "/no/such/path"),  # 404
        httpx.post(url + "/v1/chat/completions", content=b"not json", headers={"authorization": f"Bearer {key}"}),
        httpx.get(url + "/admin/v1/tenants"),  # 401: no admin token
        httpx.get(url + "/admin/v1/tenants/nobody", headers={"authorization": f"Bearer {ADMIN_TOKEN}"}),  # 404
        httpx.get(url + "/v1/models/nope", headers={"x-request-id": "mine-7"}),  # 401, the client's id
    ]
    assert [r.status_code for r in cases] == [405, 405, 404, 400, 401, 404, 401]
    for response in cases[:-1]:
        assert response.headers["x-request-id"].startswith("req-"), response.request.url
        assert "error" in response.json()
    assert cases[-1].headers["x-request-id"] == "mine-7"


def test_upstream_failures_carry_one(tokenizer_dir):
    dead = f"http://127.0.0.1:{free_port()}"
    with serve_gateway(gateway_config([dead], tokenizer_dir)) as gw:
        admin = Admin(gw.url)
        key = admin.key(admin.tenant())
        error = error_of(lambda: client(gw, key).chat.completions.create(model="tiny", messages=CHAT, max_tokens=2))
        assert error.status_code == 502 and error.response.headers["x-request-id"].startswith("req-")
