"""Gateway test fixtures: a fake OpenAI upstream on loopback, Redis DB 3 under the `sgtest:` prefix, gateways
served by uvicorn on free ports, and an admin client."""

from __future__ import annotations

import contextlib
import time
import uuid

import httpx
import pytest
import redis

from gateway.app import build_app
from gateway.cli import KEEP_ALIVE_S
from gateway.config import config_from_dict
from tests.gateway.fake_upstream import FakeUpstream
from tests.gateway.servers import ThreadServer

REDIS_URL = "redis://127.0.0.1:6379/3"
# One prefix per test session, so sessions running side by side never touch each other's keys.
PREFIX = f"sgtest:{uuid.uuid4().hex[:6]}:"
ADMIN_TOKEN = "test-admin-token"


def flush_prefix(url: str = REDIS_URL, prefix: str = PREFIX) -> None:
    client = redis.Redis.from_url(url)
    names = list(client.scan_iter(match=prefix + "*", count=1000))
    if names:
        client.delete(*names)
    client.close()


@pytest.fixture(scope="session")
def clean_redis():
    """Requested by every fixture that writes to the shared Redis: this session's keys go at start and end."""
    flush_prefix()
    yield
    flush_prefix()


@pytest.fixture(scope="session")
def tokenizer_dir(tiny_model_dir) -> str:
    return tiny_model_dir


@pytest.fixture(scope="module")
def fake():
    upstream = FakeUpstream()
    with ThreadServer(upstream.app) as server:
        upstream.url = server.url
        yield upstream


def gateway_config(
    upstream_urls, tokenizer: str | None, redis_url: str | None = None, prefix: str | None = None, **extra
) -> dict:
    config = {
        "admin_token": ADMIN_TOKEN,
        "models": {"tiny": {"replicas": list(upstream_urls), "tokenizer": tokenizer, "max_model_len": 4096}},
    }
    if redis_url:
        config["redis"] = {
            "url": redis_url,
            "key_prefix": prefix or f"{PREFIX}{uuid.uuid4().hex[:8]}:",
            "socket_timeout_s": 0.2,
            "retry_interval_s": 0.3,
            **extra.pop("redis", {}),
        }
    config.update(extra)
    return config


@contextlib.contextmanager
def serve_gateway(config: dict, **kwargs):
    app = build_app(config_from_dict(config), **kwargs)
    with ThreadServer(app, keep_alive_s=KEEP_ALIVE_S) as server:  # as `sluicegate gateway` serves it
        server.gateway = app.state.gateway
        yield server


class Admin:
    def __init__(self, url: str):
        self.http = httpx.Client(
            base_url=url + "/admin/v1", headers={"authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10
        )

    def tenant(self, tenant_id: str | None = None, **fields) -> str:
        tenant_id = tenant_id or "t" + uuid.uuid4().hex[:10]
        response, retried = self._create("/tenants", {"id": tenant_id, **fields})
        # 409 on a retry: the first try's write landed and only its reply was lost
        assert response.status_code == 201 or (response.status_code == 409 and retried), response.text
        return tenant_id

    def key(self, tenant_id: str, **fields) -> str:
        response, _ = self._create(f"/tenants/{tenant_id}/keys", fields)
        assert response.status_code == 201, response.text
        return response.json()["key"]

    def _create(self, path: str, body: dict) -> tuple[httpx.Response, bool]:
        """POST, tried up to three times while the gateway answers 503 "store unreachable", and whether it was retried:
        the test gateways give Redis 0.2 s a call (fail-open requests need a short timeout), and on a busy 2-core CI box
        an admin write sometimes waited longer (a CI run's key creation failed so, in a test about something else). The
        admin API's own 503 is tested where it is the subject (test_redis_failures.py)."""
        response = self.http.post(path, json=body)
        retries = 0
        while response.status_code == 503 and retries < 2:
            time.sleep(0.3)
            response = self.http.post(path, json=body)
            retries += 1
        return response, retries > 0

    def usage(self, tenant_id: str) -> dict:
        days = self.http.get(f"/tenants/{tenant_id}/usage").json()["days"]
        return days[0] if days else {"requests": 0, "input_tokens": 0, "output_tokens": 0}


@pytest.fixture(scope="module")
def local_gateway(fake, tokenizer_dir):
    """A gateway on the in-process store (no Redis) in front of the fake upstream."""
    with serve_gateway(gateway_config([fake.url], tokenizer_dir)) as server:
        server.admin = Admin(server.url)
        yield server


@pytest.fixture(scope="module")
def redis_gateway(fake, tokenizer_dir, clean_redis):
    """A gateway on Redis DB 3 in front of the fake upstream."""
    with serve_gateway(gateway_config([fake.url], tokenizer_dir, REDIS_URL)) as server:
        server.admin = Admin(server.url)
        yield server


@pytest.fixture(params=["local", "redis"])
def gateway(request):
    """Both stores: the request path must behave the same on either."""
    return request.getfixturevalue(f"{request.param}_gateway")


def wait_until(predicate, timeout_s: float = 10.0, interval_s: float = 0.02):
    """Poll for an eventual state (background settlement); the timeout only detects a hang."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError("condition not reached")
