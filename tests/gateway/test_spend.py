"""Spend (gateway/store/spend.py): per-model prices turn usage into micro-dollars, counted per tenant, model and key
in the settlement step, and budgets in USD are enforced at admission like the token budgets (worst case reserved,
actual cost settled). Through the HTTP API with the official openai client on both stores, the admin usage
endpoint and CLI, then each store's arithmetic directly."""

from __future__ import annotations

import copy
import json
import uuid

import openai
import pytest
import redis.asyncio as aioredis

from gateway.admin import cli as admin_cli
from gateway.admin.tenants import ApiKey, Tenant, digest_key, key_id_of
from gateway.config import ConfigError, config_from_dict
from gateway.store import base
from gateway.store.base import AdmitRequest, Settlement
from gateway.store.memory import MemoryStore
from gateway.store.redis_store import RedisStore
from gateway.store.spend import Price, cost_micro_usd, micro_usd, worst_cost_micro_usd
from tests.gateway.conftest import ADMIN_TOKEN, PREFIX, REDIS_URL, Admin, gateway_config, serve_gateway, wait_until

# USD per million tokens = micro-dollars per token: the costs below are easy to follow.
TINY_PRICE = {"input_usd_per_mtok": 2, "cached_input_usd_per_mtok": 1, "output_usd_per_mtok": 8}
SMALL_PRICE = {"input_usd_per_mtok": 3.5, "output_usd_per_mtok": 5}
CHAT = [{"role": "user", "content": "What does the ledger say?"}]


def priced_config(upstream_url: str, tokenizer_dir: str, redis_url: str | None) -> dict:
    config = gateway_config([upstream_url], tokenizer_dir, redis_url)
    config["models"]["small"] = copy.deepcopy(config["models"]["tiny"])
    config["models"]["plain"] = copy.deepcopy(config["models"]["tiny"])  # no price
    config["models"]["tiny"]["price"] = TINY_PRICE
    config["models"]["small"]["price"] = SMALL_PRICE
    return config


@pytest.fixture(scope="module", params=["local", "redis"])
def priced(request, fake, tokenizer_dir):
    """A gateway on either store, in front of the fake upstream, serving two priced models and one without a price."""
    if request.param == "redis":
        request.getfixturevalue("clean_redis")
    redis_url = REDIS_URL if request.param == "redis" else None
    with serve_gateway(priced_config(fake.url, tokenizer_dir, redis_url)) as gw:
        gw.admin = Admin(gw.url)
        yield gw


def client(gw, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=30)


def chat(gw, key: str, model: str = "tiny", max_tokens: int = 10, **fake):
    return client(gw, key).chat.completions.with_raw_response.create(
        model=model, messages=CHAT, max_tokens=max_tokens, extra_body={"fake": fake}
    )


def usage_response(gw, tenant: str) -> dict:
    return gw.admin.http.get(f"/tenants/{tenant}/usage").json()


def test_usage_in_tokens_and_dollars_per_model_and_key(priced, capsys):
    gw, admin = priced, priced.admin
    tenant = admin.tenant()
    first, second = admin.key(tenant), admin.key(tenant)
    chat(gw, first, prompt_tokens=50, tokens=10, cached_tokens=20)
    chat(gw, second, model="small", prompt_tokens=41, tokens=6)
    stream = client(gw, second).chat.completions.create(
        model="tiny",
        messages=CHAT,
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"fake": {"prompt_tokens": 10, "tokens": 4}},
    )
    assert list(stream)[-1].usage.completion_tokens == 4
    wait_until(lambda: usage_response(gw, tenant)["days"] and usage_response(gw, tenant)["days"][0]["requests"] == 3)

    first_cost = (50 - 20) * 2 + 20 * 1 + 10 * 8  # uncached input, cached input, output (micro-dollars per token)
    small_cost = -(-(41 * 3500 + 6 * 5000) // 1000)  # $3.5/Mtok: 3,500 nano-dollars a token; rounded up
    streamed_cost = 10 * 2 + 4 * 8
    body = usage_response(gw, tenant)
    day, total = body["days"][0], body["total"]
    for counts in (day, total):
        assert counts["cost_micro_usd"] == first_cost + small_cost + streamed_cost
        assert counts["cost_usd"] == pytest.approx(counts["cost_micro_usd"] / 1e6)
        assert counts["cached_input_tokens"] == 20
        assert (counts["input_tokens"], counts["output_tokens"]) == (101, 20)
        assert counts["by_model"]["tiny"]["cost_micro_usd"] == first_cost + streamed_cost
        assert counts["by_model"]["tiny"]["cached_input_tokens"] == 20
        assert counts["by_model"]["small"] == {
            "requests": 1,
            "input_tokens": 41,
            "output_tokens": 6,
            "cost_micro_usd": small_cost,
            "cost_usd": pytest.approx(small_cost / 1e6),
        }
        assert counts["by_key"][key_id_of(digest_key(first))]["cost_micro_usd"] == first_cost
        assert counts["by_key"][key_id_of(digest_key(second))]["cost_micro_usd"] == small_cost + streamed_cost

    capsys.readouterr()  # the gateway's own log lines so far
    assert admin_cli.main(["--url", gw.url, "--token", ADMIN_TOKEN, "usage", tenant]) == 0
    out = capsys.readouterr().out
    printed = json.loads(out[out.index("{\n") :])  # the CLI's indented JSON, after any log line the gateway wrote
    assert printed["total"]["cost_micro_usd"] == first_cost + small_cost + streamed_cost


@pytest.mark.parametrize("budget", ["daily_budget_usd", "monthly_budget_usd"])
def test_a_tenant_out_of_money_is_refused_without_upstream_work(priced, fake, budget):
    gw, admin = priced, priced.admin
    budget_micro_usd = 500
    tenant = admin.tenant(input_tpm=1_000_000, **{budget: budget_micro_usd / 1e6})
    key = admin.key(tenant)
    answer = chat(gw, key, prompt_tokens=50, tokens=10)
    prompt_tokens = 1_000_000 - int(answer.headers["x-ratelimit-remaining-input-tokens"])  # what admission counted
    worst = prompt_tokens * 2 + 10 * 8  # reserved: the prompt uncached, all of max_tokens
    actual = 50 * 2 + 10 * 8  # settled: what the upstream reported

    def settled(count: int) -> None:
        wait_until(lambda: usage_response(gw, tenant)["total"]["requests"] == count)

    spent, served = actual, 1
    while spent + worst <= budget_micro_usd:
        settled(served)  # admission sees what the last one actually cost
        chat(gw, key, prompt_tokens=50, tokens=10)
        spent, served = spent + actual, served + 1
    settled(served)
    assert served >= 2
    upstream_requests = len(fake.received)
    with pytest.raises(openai.RateLimitError) as refused:
        chat(gw, key, prompt_tokens=50, tokens=10)
    assert refused.value.status_code == 429 and refused.value.code == "insufficient_quota"
    assert "spend budget" in refused.value.message
    assert int(refused.value.response.headers["retry-after"]) > 0
    assert len(fake.received) == upstream_requests  # refused before any upstream work
    assert usage_response(gw, tenant)["total"]["cost_micro_usd"] == spent


def test_a_request_dearer_than_the_whole_spend_budget_says_so(priced):
    tenant = priced.admin.tenant(input_tpm=1_000_000, daily_budget_usd=0.0001)  # 100 micro-dollars
    with pytest.raises(openai.RateLimitError) as refused:
        chat(priced, priced.admin.key(tenant), max_tokens=100)  # 100 output tokens at 8 micro-dollars each
    assert refused.value.code == "insufficient_quota"
    assert "too large for the daily spend budget" in refused.value.message
    assert "retry-after" not in refused.value.response.headers  # tomorrow's budget would refuse it too


def test_budget_fields_are_validated(priced):
    admin = priced.admin
    tenant = admin.tenant(daily_budget_usd=5, monthly_budget_usd=120.5)
    record = admin.http.get(f"/tenants/{tenant}").json()
    assert (record["daily_budget_usd"], record["monthly_budget_usd"]) == (5.0, 120.5)
    for value in (-1, "5", 1e12):
        refused = admin.http.patch(f"/tenants/{tenant}", json={"daily_budget_usd": value})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "daily_budget_usd"
    # one priced model among the tenant's is enough; none is refused (test_admin.py, on an unpriced gateway)
    assert admin.http.patch(f"/tenants/{tenant}", json={"models": ["tiny", "plain"]}).status_code == 200
    # ... also when only the models change: the stored budget would stop counting, silently
    refused = admin.http.patch(f"/tenants/{tenant}", json={"models": ["plain"]})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "budget_without_price"
    assert admin.http.get(f"/tenants/{tenant}").json()["models"] == ["tiny", "plain"]
    assert admin.http.patch(f"/tenants/{tenant}", json={"models": ["plain"], "daily_budget_usd": 0}).status_code == 400
    both_off = {"models": ["plain"], "daily_budget_usd": 0, "monthly_budget_usd": 0}
    assert admin.http.patch(f"/tenants/{tenant}", json=both_off).status_code == 200


def test_prices_are_validated():
    def config(price: dict) -> None:
        config_from_dict({"models": {"m": {"replicas": ["http://127.0.0.1:1"], "price": price}}})

    config({"input_usd_per_mtok": 0.075, "output_usd_per_mtok": 0.3})
    for price, field in (
        ({"input_usd_per_mtok": 0.0001, "output_usd_per_mtok": 1}, "input_usd_per_mtok"),
        ({"input_usd_per_mtok": 1, "output_usd_per_mtok": -1}, "output_usd_per_mtok"),
        ({"input_usd_per_mtok": 1}, "output_usd_per_mtok"),
        ({"input_usd_per_mtok": 1, "output_usd_per_mtok": 1, "currency": "EUR"}, "currency"),
    ):
        with pytest.raises(ConfigError, match=field):
            config(price)


def test_cost_arithmetic():
    price = Price(input_nano_usd=150, cached_input_nano_usd=75, output_nano_usd=600)  # $0.15 / 0.075 / 0.6 per Mtok
    assert cost_micro_usd(price, 1000, 0, 0) == 150
    assert cost_micro_usd(price, 1, 0, 0) == 1  # a fraction of a micro-dollar is charged as one
    assert cost_micro_usd(price, 1000, 400, 100) == (600 * 150 + 400 * 75 + 100 * 600) // 1000
    assert cost_micro_usd(price, 10, 50, 0) == cost_micro_usd(price, 10, 10, 0)  # cached is part of the input
    pricier_cache = Price(input_nano_usd=100, cached_input_nano_usd=300, output_nano_usd=0)
    assert worst_cost_micro_usd(pricier_cache, 1000, 0) == 300  # the worst case takes the dearer input price
    assert micro_usd(0.29) == 290_000 and micro_usd(1e9) == 10**15


# ---- each store's arithmetic -------------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "redis"])
async def store(request):
    if request.param == "memory":
        yield MemoryStore()
        return
    request.getfixturevalue("clean_redis")
    prefix = f"{PREFIX}spend-{uuid.uuid4().hex[:8]}:"
    redis_store = RedisStore(REDIS_URL, prefix, 1.0)
    yield redis_store
    await redis_store.close()
    client = aioredis.Redis.from_url(REDIS_URL)
    names = [n async for n in client.scan_iter(match=prefix + "*")]
    if names:
        await client.delete(*names)
    await client.aclose()


async def new_tenant(store, **fields) -> tuple[str, str]:
    tenant = await store.put_tenant(Tenant(id="t" + uuid.uuid4().hex[:8], **fields))
    digest = uuid.uuid4().hex * 2
    await store.put_key(ApiKey(key_id_of(digest), tenant.id, digest))
    return tenant.id, digest


async def admit(store, tenant_id: str, digest: str, request_id: str, cost: int):
    request = AdmitRequest(tenant_id, digest, "m", 10, 10, 1, request_id, 60.0, reserved_cost_micro_usd=cost)
    return await store.admit(request)


def settlement(tenant_id: str, digest: str, admission, request_id: str, cost: int, kind: str = base.FINAL):
    return Settlement(
        tenant_id,
        digest,
        "m",
        request_id,
        10,
        admission.reserved_out,
        0 if kind == base.VOID else 10,
        0 if kind == base.VOID else 5,
        admission.day,
        admission.month,
        kind=kind,
        cached_in=0 if kind == base.VOID else 4,
        reserved_cost_micro_usd=admission.reserved_cost_micro_usd,
        cost_micro_usd=cost,
    )


@pytest.mark.asyncio(loop_scope="session")
async def test_money_budgets_reserve_the_worst_case_and_settle_the_actual_cost(store):
    t, k = await new_tenant(store, daily_budget_usd=0.001, monthly_budget_usd=0.0015)  # 1,000 / 1,500 micro
    first = await admit(store, t, k, "r1", 600)
    assert first.ok and first.reserved_cost_micro_usd == 600
    assert first.headroom["daily_micro_usd"] == (1000, 400)
    assert first.headroom["monthly_micro_usd"] == (1500, 900)
    refused = await admit(store, t, k, "r2", 500)  # 600 held + 500 > 1,000
    assert refused.reason == base.DAILY_BUDGET_USD and refused.retry_after_s > 0
    await store.settle(settlement(t, k, first, "r1", 100))  # the actual cost replaces the reservation
    second = await admit(store, t, k, "r2", 500)
    assert second.ok and second.headroom["daily_micro_usd"] == (1000, 400)
    await store.settle(settlement(t, k, second, "r2", 0, kind=base.VOID))  # a void gives its reservation back
    third = await admit(store, t, k, "r3", 900)
    assert third.ok and third.headroom["daily_micro_usd"] == (1000, 0)
    await store.settle(settlement(t, k, third, "r3", 900))
    fourth = await admit(store, t, k, "r4", 1)
    assert fourth.reason == base.DAILY_BUDGET_USD
    usage = (await store.usage(t, [first.day]))[first.day]
    assert (usage["requests"], usage["cost_micro_usd"], usage["cached_input_tokens"]) == (2, 1000, 8)
    assert usage[f"key:{key_id_of(k)}:cost_micro_usd"] == usage["model:m:cost_micro_usd"] == 1000


@pytest.mark.asyncio(loop_scope="session")
async def test_the_monthly_money_budget_and_a_recorded_request(store):
    t, k = await new_tenant(store, monthly_budget_usd=0.0005)
    first = await admit(store, t, k, "r1", 300)
    assert first.ok and "daily_micro_usd" not in first.headroom
    # served on a gateway's local buckets while Redis was down: its cost counts once Redis has it
    record = settlement(t, k, first, "fallback-1", 150, kind=base.RECORD)
    await store.settle(record)
    refused = await admit(store, t, k, "r2", 100)  # 300 held + 150 spent + 100 > 500
    assert refused.reason == base.MONTHLY_BUDGET_USD
    assert (await store.usage(t, [first.day]))[first.day]["cost_micro_usd"] == 150
