"""Overlapped admission, for real (gateway + Redis + an upstream on loopback): a key far from its limits is sent
upstream while its admission script runs; a refusal that comes anyway cancels the upstream request and leaks no
reservation; a key near a limit is admitted first, so a refused request never reaches the upstream."""

from __future__ import annotations

import contextlib

import httpx
import redis

from gateway.request import overlap
from tests.gateway.conftest import REDIS_URL, Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.servers import ThreadServer
from tests.gateway.slow_upstream import SlowUpstream


def chat(url: str, key: str, delay_s: float = 0.0) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        timeout=20,
        json={
            "model": "tiny",
            "stream": True,
            "max_tokens": 20,
            "fake_delay_s": delay_s,
            "messages": [{"role": "user", "content": "hello there"}],
        },
    )


def metric(gw, name: str) -> float:
    return getattr(gw.gateway.metrics, name)._value.get()


def inflight(gw, tenant: str) -> int:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        return client.zcard(f"{gw.gateway.config.redis.key_prefix}{{t:{tenant}}}:inflight")
    finally:
        client.close()


def test_a_key_far_from_its_limits_overlaps_and_is_charged_as_usual(tokenizer_dir, clean_redis, monkeypatch):
    monkeypatch.setattr(overlap, "MAX_VIEW_AGE_S", 60.0)
    upstream = SlowUpstream(["tok "] * 20, delay_s=0.05)
    with ThreadServer(upstream.app) as up, serve_gateway(gateway_config([up.url], tokenizer_dir, REDIS_URL)) as gw:
        admin = Admin(gw.url)
        tenant = admin.tenant(rpm=1000, input_tpm=1_000_000, output_tpm=1_000_000)
        key = admin.key(tenant)
        answers = [chat(gw.url, key) for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert all(a.text.rstrip().endswith("data: [DONE]") for a in answers)
        assert all("x-ratelimit-remaining-requests" in a.headers for a in answers)
        assert metric(gw, "overlapped") == 2  # the first request had no view of the key yet: admitted first
        assert upstream.finished == 3
        usage = wait_until(lambda: (u := admin.usage(tenant))["requests"] == 3 and u)
        assert usage["output_tokens"] == 60
        wait_until(lambda: inflight(gw, tenant) == 0)


@contextlib.contextmanager
def two_gateways(upstream_url: str, tokenizer_dir: str):
    """Two instances on one Redis: admin changes go through the second, so the first learns of them only from
    Redis (an instance drops its own cached copies at once when it takes an admin change)."""
    config = gateway_config([upstream_url], tokenizer_dir, REDIS_URL)
    with serve_gateway(config) as gw, serve_gateway(config) as other:
        yield gw, Admin(other.url)


def test_a_refusal_after_overlapping_cancels_the_upstream_request_and_takes_nothing(
    tokenizer_dir, clean_redis, monkeypatch
):
    monkeypatch.setattr(overlap, "MAX_VIEW_AGE_S", 60.0)  # a slow CI box must not age the view out mid-test
    upstream = SlowUpstream(["tok "] * 20, delay_s=0.05)
    with ThreadServer(upstream.app) as up, two_gateways(up.url, tokenizer_dir) as (gw, admin):
        tenant = admin.tenant(rpm=1000, input_tpm=1_000_000, output_tpm=1_000_000)
        key = admin.key(tenant)
        assert chat(gw.url, key).status_code == 200  # the gateway now holds a view with ample headroom
        key_id = admin.http.get(f"/tenants/{tenant}/keys").json()["data"][0]["key_id"]
        assert admin.http.post(f"/tenants/{tenant}/keys/{key_id}/revoke").status_code == 200
        refused = chat(gw.url, key, delay_s=0.5)  # revoked in Redis; the first gateway's view does not know yet
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "invalid_api_key"
        assert metric(gw, "overlap_refusals") == 1
        # The upstream got the request (unless the refusal came before it was written) and lost it at once: its
        # stream was cancelled, not run to the end.
        if upstream.received == 2:
            wait_until(lambda: upstream.cancelled == 1)
        assert upstream.finished == 1
        wait_until(lambda: inflight(gw, tenant) == 0)
        assert admin.usage(tenant)["requests"] == 1


def test_a_key_near_a_limit_is_admitted_first_so_refused_requests_never_reach_the_upstream(tokenizer_dir, clean_redis):
    upstream = SlowUpstream(["tok "] * 20, delay_s=0.05)
    with ThreadServer(upstream.app) as up, serve_gateway(gateway_config([up.url], tokenizer_dir, REDIS_URL)) as gw:
        admin = Admin(gw.url)
        tenant = admin.tenant(rpm=2, input_tpm=1_000_000, output_tpm=1_000_000)
        key = admin.key(tenant)
        statuses = [chat(gw.url, key).status_code for _ in range(3)]
        assert statuses == [200, 200, 429]
        assert metric(gw, "overlapped") == 0  # after the first, 1 of 2 requests left: under a quarter after the next
        assert upstream.received == 2


def test_a_tenant_changed_by_the_admin_is_sent_again_with_its_new_settings(
    fake, tokenizer_dir, clean_redis, monkeypatch
):
    """The overlapped request left with the gateway's old copy of the tenant; the admission answer says the tenant
    changed (it joined a cache group), so that request is cancelled and sent again with the new cache salt."""
    monkeypatch.setattr(overlap, "MAX_VIEW_AGE_S", 60.0)
    with two_gateways(fake.url, tokenizer_dir) as (gw, admin):
        tenant = admin.tenant(rpm=1000, input_tpm=1_000_000, output_tpm=1_000_000)
        key = admin.key(tenant)

        def send() -> dict:
            answer = httpx.post(
                gw.url + "/v1/chat/completions",
                headers={"authorization": f"Bearer {key}"},
                timeout=20,
                json={"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
            )
            assert answer.status_code == 200, answer.text
            return fake.received[-1]

        assert send().get("cache_salt") == tenant  # its own prefix cache: the default
        assert admin.http.patch(f"/tenants/{tenant}", json={"cache_group": "overlap-org"}).status_code == 200
        assert send().get("cache_salt") == "group:overlap-org"
        assert metric(gw, "overlapped") == 0  # the stale overlap was abandoned, not counted as overlapped
        wait_until(lambda: admin.usage(tenant)["requests"] == 2)
