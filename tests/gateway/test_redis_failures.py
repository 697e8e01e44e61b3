"""Redis unreachable or slow (docs/architecture.md): fail_open keeps serving on local buckets at limit / instances and
records that usage in Redis once it is back, fail_closed answers 503, both recover by themselves; a paused Redis
never hangs a request; a flushed script cache is reloaded (NOSCRIPT)."""

from __future__ import annotations

import httpx
import pytest

from tests.gateway.conftest import Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.redis_process import RedisProcess

CHAT = [{"role": "user", "content": "hi"}]


@pytest.fixture
def own_redis(tmp_path):
    server = RedisProcess(str(tmp_path)).start()
    yield server
    server.stop()


def chat(gw, key: str, max_tokens: int = 1) -> httpx.Response:
    # the client timeout only detects a hang; Redis calls are bounded at 0.2 s by the gateway
    return httpx.post(
        gw.url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        timeout=20,
        json={"model": "tiny", "messages": CHAT, "max_tokens": max_tokens},
    )


def redis_state(gw) -> str:
    return httpx.get(gw.url + "/health").json()["redis"]


def test_fail_open_serves_on_local_buckets_and_recovers(fake, tokenizer_dir, own_redis):
    config = gateway_config([fake.url], tokenizer_dir, own_redis.url, num_instances=2)
    with serve_gateway(config) as gw:
        admin = Admin(gw.url)
        tenant = admin.tenant(rpm=6)
        key = admin.key(tenant)
        ok = chat(gw, key)
        assert ok.status_code == 200 and ok.headers["x-ratelimit-limit-requests"] == "6"

        own_redis.kill()
        served = [chat(gw, key) for _ in range(5)]
        assert [r.status_code for r in served[:3]] == [200, 200, 200]  # rpm 6 / 2 instances, locally
        assert served[0].headers["x-ratelimit-limit-requests"] == "3"
        assert served[-1].status_code == 429
        assert redis_state(gw) == "down"
        metrics = httpx.get(gw.url + "/metrics").text
        assert 'sluicegate_redis_fallbacks_total{mode="fail_open",op="admit"}' in metrics

        own_redis.start()
        after = []
        wait_until(lambda: after.append(chat(gw, key)) or after[-1].headers.get("x-ratelimit-limit-requests") == "6")
        assert redis_state(gw) == "up"
        # What was served locally during the outage is recorded in Redis once it is back: nothing goes missing.
        served_ok = 1 + sum(r.status_code == 200 for r in served + after)
        wait_until(lambda: admin.usage(tenant)["requests"] == served_ok)


def test_fail_open_budgets_start_from_what_redis_last_said_was_left(fake, tokenizer_dir, own_redis):
    """A tenant that spent most of its day must not get a fresh day's budget because Redis went away."""
    with serve_gateway(gateway_config([fake.url], tokenizer_dir, own_redis.url)) as gw:
        admin = Admin(gw.url)
        key = admin.key(admin.tenant(daily_tokens=200))
        assert chat(gw, key, max_tokens=100).status_code == 200  # the prompt (~25) and 100 of the 200 spent
        own_redis.kill()
        refused = chat(gw, key, max_tokens=100)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "insufficient_quota"
        assert chat(gw, key, max_tokens=10).status_code == 200  # what is left still serves


def test_fail_open_usd_budgets_start_from_what_redis_last_said_was_left(fake, tokenizer_dir, own_redis):
    """The same for a budget in dollars: an outage does not hand the tenant a fresh day's money."""
    config = gateway_config([fake.url], tokenizer_dir, own_redis.url)
    config["models"]["tiny"]["price"] = {"input_usd_per_mtok": 10_000, "output_usd_per_mtok": 10_000}  # 1 cent/token
    with serve_gateway(config) as gw:
        admin = Admin(gw.url)
        key = admin.key(admin.tenant(daily_budget_usd=2))  # 200 tokens' worth
        # admission reserved the worst case (prompt + 100 tokens, ~$1.25): Redis' answer says ~$0.75 is left
        assert chat(gw, key, max_tokens=100).status_code == 200
        own_redis.kill()
        refused = chat(gw, key, max_tokens=100)  # its worst case (~$1.25) is more than the ~$0.75 left
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "insufficient_quota"
        assert chat(gw, key, max_tokens=10).status_code == 200  # what is left still serves


def test_fail_open_serves_a_tenant_that_was_edited(fake, tokenizer_dir, own_redis):
    """An edited tenant (generation 2 in Redis) must not look stale against the local copy's own counter."""
    with serve_gateway(gateway_config([fake.url], tokenizer_dir, own_redis.url)) as gw:
        admin = Admin(gw.url)
        tenant = admin.tenant(rpm=100)
        key = admin.key(tenant)
        assert admin.http.patch(f"/tenants/{tenant}", json={"rpm": 200}).status_code == 200
        assert chat(gw, key).status_code == 200
        own_redis.kill()
        assert [chat(gw, key).status_code for _ in range(3)] == [200, 200, 200]


def test_fail_closed_answers_503_and_recovers(fake, tokenizer_dir, own_redis):
    config = gateway_config([fake.url], tokenizer_dir, own_redis.url, redis={"failure_mode": "fail_closed"})
    with serve_gateway(config) as gw:
        admin = Admin(gw.url)
        key = admin.key(admin.tenant())
        assert chat(gw, key).status_code == 200
        own_redis.kill()
        refused = chat(gw, key)
        assert refused.status_code == 503 and "retry-after" in refused.headers
        assert refused.json()["error"]["code"] == "service_unavailable"
        assert chat(gw, key).status_code == 503
        assert httpx.get(gw.url + "/admin/v1/tenants", headers=admin.http.headers).status_code == 503
        own_redis.start()
        wait_until(lambda: chat(gw, key).status_code == 200)


def test_paused_redis_never_hangs_a_request(fake, tokenizer_dir, own_redis):
    config = gateway_config([fake.url], tokenizer_dir, own_redis.url)
    with serve_gateway(config) as gw:
        admin = Admin(gw.url)
        key = admin.key(admin.tenant())
        assert chat(gw, key).status_code == 200
        own_redis.pause()
        try:
            assert [chat(gw, key).status_code for _ in range(3)] == [200, 200, 200]  # bounded, then fail_open
            assert redis_state(gw) == "down"
        finally:
            own_redis.resume()
        wait_until(lambda: chat(gw, key).status_code == 200 and redis_state(gw) == "up")


def test_flushed_scripts_are_reloaded(fake, tokenizer_dir, own_redis):
    config = gateway_config([fake.url], tokenizer_dir, own_redis.url)
    with serve_gateway(config) as gw:
        admin = Admin(gw.url)
        key = admin.key(admin.tenant(rpm=100))
        assert chat(gw, key).status_code == 200
        own_redis.client().script_flush()
        response = chat(gw, key)
        assert response.status_code == 200 and response.headers["x-ratelimit-remaining-requests"] == "98"
        assert redis_state(gw) == "up"
