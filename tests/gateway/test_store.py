"""Bucket arithmetic of both stores, which must agree: refill, all-or-nothing, reconciliation (refund, extra
charge, debt), budgets, concurrency leases, per-key limits, key and model checks, the Redis clock."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis.asyncio as aioredis

from gateway.admin.tenants import ApiKey, Tenant, key_id_of
from gateway.store import base
from gateway.store.base import AdmitRequest, Settlement
from gateway.store.memory import MemoryStore
from gateway.store.redis_store import RedisStore
from tests.gateway.conftest import PREFIX, REDIS_URL

pytestmark = pytest.mark.asyncio(loop_scope="session")


class Harness:
    """One store plus what a test needs around it: tenants, keys, and a way to let time pass for the buckets."""

    def __init__(self, kind: str):
        self.kind = kind
        self.prefix = f"{PREFIX}store-{uuid.uuid4().hex[:8]}:"
        self.store = MemoryStore() if kind == "memory" else RedisStore(REDIS_URL, self.prefix, 1.0)
        self.seq = 0

    async def tenant(self, **limits) -> tuple[str, str]:
        tenant = Tenant(id="t" + uuid.uuid4().hex[:8], **limits)
        await self.store.put_tenant(tenant)
        digest = uuid.uuid4().hex * 2
        await self.store.put_key(ApiKey(key_id_of(digest), tenant.id, digest))
        return tenant.id, digest

    async def admit(
        self,
        tenant_id: str,
        digest: str,
        prompt: int = 10,
        max_tokens: int | None = 10,
        model: str = "m",
        lease_s: float = 60.0,
        completions: int = 1,
    ):
        self.seq += 1
        request_id = f"r{self.seq}"
        admission = await self.store.admit(
            AdmitRequest(tenant_id, digest, model, prompt, max_tokens, completions, request_id, lease_s)
        )
        admission.request_id, admission.prompt = request_id, prompt
        return admission

    async def settle(
        self, tenant_id: str, digest: str, admission, actual_in: int, actual_out: int, tenant_created_ms: int = 0
    ) -> None:
        await self.store.settle(
            Settlement(
                tenant_id,
                digest,
                "m",
                admission.request_id,
                admission.prompt,
                admission.reserved_out,
                actual_in,
                actual_out,
                admission.day,
                admission.month,
                tenant_created_ms=tenant_created_ms,
            )
        )

    async def age(self, tenant_id: str, seconds: float) -> None:
        """Make every bucket of the tenant `seconds` older, as if that much store time had passed."""
        ms = int(seconds * 1000)
        if self.kind == "memory":
            for state in self.store._buckets.values():
                state[1] -= ms
            return
        client = aioredis.Redis.from_url(REDIS_URL)
        async for name in client.scan_iter(match=f"{self.prefix}{{t:{tenant_id}}}:*b:*"):
            await client.hincrby(name, "t", -ms)
        await client.aclose()


@pytest.fixture(params=["memory", "redis"])
async def h(request, clean_redis):
    harness = Harness(request.param)
    yield harness
    if request.param == "redis":
        client = aioredis.Redis.from_url(REDIS_URL)
        names = [n async for n in client.scan_iter(match=harness.prefix + "*")]
        if names:
            await client.delete(*names)
        await client.aclose()
        await harness.store.close()


async def test_admission_takes_from_every_bucket(h):
    t, k = await h.tenant(rpm=60, input_tpm=1000, output_tpm=600)
    a = await h.admit(t, k, prompt=100, max_tokens=50)
    assert a.ok
    assert (a.buckets["requests"].limit, a.buckets["requests"].remaining) == (60, 59)
    assert (a.buckets["input_tokens"].limit, a.buckets["input_tokens"].remaining) == (1000, 900)
    assert (a.buckets["output_tokens"].limit, a.buckets["output_tokens"].remaining) == (600, 550)
    assert a.buckets["input_tokens"].reset_s == pytest.approx(6.0, abs=0.1)  # 100 tokens at 1000/min


async def test_all_or_nothing(h):
    t, k = await h.tenant(rpm=60, input_tpm=1000, output_tpm=100)
    refused = await h.admit(t, k, prompt=500, max_tokens=101)  # input fits, output does not
    assert refused.reason == base.OUTPUT_TOKENS + base.TOO_LARGE
    refused = await h.admit(t, k, prompt=500, max_tokens=60)
    assert refused.ok
    refused = await h.admit(t, k, prompt=100, max_tokens=60)  # output bucket holds ~40 now
    assert refused.reason == base.OUTPUT_TOKENS
    assert refused.retry_after_s == pytest.approx(12.0, abs=0.2)  # 20 missing at 100/min
    after = await h.admit(t, k, prompt=500, max_tokens=1)
    assert after.ok, "the refused request must not have taken input tokens or a request"
    assert after.buckets["input_tokens"].remaining == 0
    assert after.buckets["requests"].remaining == 58


async def test_default_reservation_is_the_tenants(h):
    t, k = await h.tenant(output_tpm=1000, default_max_tokens=123)
    a = await h.admit(t, k, max_tokens=None)
    assert a.ok and a.reserved_out == 123
    assert a.buckets["output_tokens"].remaining == 877


async def test_the_default_reservation_is_never_more_than_a_minute_of_output(h):
    """A default above output_tpm could never be admitted: every request without max_tokens would be too large."""
    t, k = await h.tenant(output_tpm=50, default_max_tokens=256)
    a = await h.admit(t, k, max_tokens=None)
    assert a.ok and a.reserved_out == 50 == Tenant(id=t, output_tpm=50).default_reservation


async def test_reservation_covers_every_completion(h):
    """n choices of each of several prompts: max_tokens (given or the default) is reserved for every one of them."""
    t, k = await h.tenant(output_tpm=1000, default_max_tokens=50)
    given = await h.admit(t, k, max_tokens=100, completions=8)
    assert given.ok and given.reserved_out == 800 and given.buckets["output_tokens"].remaining == 200
    default = await h.admit(t, k, max_tokens=None, completions=4)
    assert default.ok and default.reserved_out == 200
    too_large = await h.admit(t, k, max_tokens=300, completions=4)
    assert too_large.reason == base.OUTPUT_TOKENS + base.TOO_LARGE


async def test_refill_is_continuous_and_capped(h):
    t, k = await h.tenant(rpm=60)
    for _ in range(60):
        assert (await h.admit(t, k)).ok
    refused = await h.admit(t, k)
    assert refused.reason == base.REQUESTS and 0 < refused.retry_after_s <= 1.0
    await h.age(t, 10)  # 10 s at 1 request/s
    admitted = [(await h.admit(t, k)).ok for _ in range(12)]
    assert admitted[:10] == [True] * 10 and admitted[-1] is False
    await h.age(t, 3600)  # capped at one minute's allowance
    assert sum([(await h.admit(t, k)).ok for _ in range(70)]) == 60


async def test_reconciliation_refunds_and_charges(h):
    t, k = await h.tenant(output_tpm=600)
    a = await h.admit(t, k, max_tokens=500)
    await h.settle(t, k, a, actual_in=10, actual_out=100)  # 400 back
    b = await h.admit(t, k, max_tokens=1)
    assert b.buckets["output_tokens"].remaining in (498, 499)
    await h.settle(t, k, b, actual_in=10, actual_out=300)  # 299 more than reserved
    c = await h.admit(t, k, max_tokens=1)
    assert c.buckets["output_tokens"].remaining in (198, 199, 200)


async def test_debt_is_bounded_by_one_minute(h):
    t, k = await h.tenant(output_tpm=60)
    a = await h.admit(t, k, max_tokens=10)
    await h.settle(t, k, a, actual_in=10, actual_out=10_000)
    refused = await h.admit(t, k, max_tokens=10)
    assert refused.reason == base.OUTPUT_TOKENS
    assert refused.retry_after_s == pytest.approx(70.0, abs=1.0)  # from -60 to 10 at 1 token/s


async def test_daily_budget(h):
    t, k = await h.tenant(daily_tokens=100)
    a = await h.admit(t, k, prompt=30, max_tokens=40)
    assert a.ok
    refused = await h.admit(t, k, prompt=30, max_tokens=40)
    assert refused.reason == base.DAILY_BUDGET and refused.retry_after_s > 0
    await h.settle(t, k, a, actual_in=30, actual_out=10)  # spent 40 of 100
    assert (await h.admit(t, k, prompt=30, max_tokens=30)).ok
    assert (await h.admit(t, k, prompt=1, max_tokens=1)).reason == base.DAILY_BUDGET


async def test_monthly_budget(h):
    t, k = await h.tenant(monthly_tokens=50)
    assert (await h.admit(t, k, prompt=20, max_tokens=20)).ok
    refused = await h.admit(t, k, prompt=20, max_tokens=20)
    assert refused.reason == base.MONTHLY_BUDGET and refused.retry_after_s > 0


async def test_concurrency_slots_and_leases(h):
    t, k = await h.tenant(max_concurrent=2)
    a = await h.admit(t, k)
    await h.admit(t, k, lease_s=0.05)
    assert (await h.admit(t, k)).reason == base.CONCURRENCY
    await h.settle(t, k, a, 10, 10)
    assert (await h.admit(t, k)).ok
    assert (await h.admit(t, k)).reason == base.CONCURRENCY
    await asyncio.sleep(0.1)  # the short lease ran out: a crashed gateway cannot hold a slot forever
    assert (await h.admit(t, k)).ok


async def test_every_refusal_reports_the_buckets(h):
    """Concurrency and budget refusals carry the bucket views too: the rate-limit headers are on every answer."""
    t, k = await h.tenant(rpm=60, output_tpm=1000, max_concurrent=1, daily_tokens=1000)
    assert (await h.admit(t, k, prompt=10, max_tokens=10)).ok
    busy = await h.admit(t, k, prompt=10, max_tokens=10)
    assert busy.reason == base.CONCURRENCY and busy.retry_after_s == pytest.approx(1.0)
    assert busy.buckets["requests"].remaining == 59 and busy.buckets["output_tokens"].remaining == 990
    t2, k2 = await h.tenant(rpm=60, daily_tokens=30)
    over = await h.admit(t2, k2, prompt=20, max_tokens=20)
    assert over.reason == base.DAILY_BUDGET and over.buckets["requests"].remaining == 60


async def test_admissions_report_what_is_left_of_the_tenant_wide_limits(h):
    """Concurrency and budgets left after the request (the overlap gate's view), only for limits the tenant has."""
    t, k = await h.tenant(max_concurrent=4, daily_tokens=1000, monthly_tokens=5000)
    a = await h.admit(t, k, prompt=30, max_tokens=20)
    assert a.headroom == {"concurrency": (4, 3), "daily_tokens": (1000, 950), "monthly_tokens": (5000, 4950)}
    await h.settle(t, k, a, actual_in=30, actual_out=10)
    b = await h.admit(t, k, prompt=30, max_tokens=20)
    assert b.headroom == {"concurrency": (4, 3), "daily_tokens": (1000, 910), "monthly_tokens": (5000, 4910)}
    t2, k2 = await h.tenant()
    assert (await h.admit(t2, k2)).headroom == {}


async def test_admissions_report_the_tenants_own_buckets_apart_from_the_keys(h):
    """The tenant's buckets are shared by all its keys: the overlap gate must see them per tenant, not only the
    tighter-of-tenant-and-key view per key."""
    t, k = await h.tenant(rpm=60, input_tpm=1000)
    key = await h.store.get_key(k)
    key.rpm = 10
    await h.store.put_key(key)
    a = await h.admit(t, k, prompt=100, max_tokens=5)
    assert a.buckets["requests"].limit == 10 and a.buckets["requests"].remaining == 9
    assert a.headroom == {"requests": (60, 59), "input_tokens": (1000, 900)}


async def test_key_limits_are_tighter(h):
    t, k = await h.tenant(rpm=100)
    key = await h.store.get_key(k)
    key.rpm = 2
    await h.store.put_key(key)
    first = await h.admit(t, k)
    assert first.buckets["requests"].limit == 2 and first.buckets["requests"].remaining == 1
    assert (await h.admit(t, k)).ok
    assert (await h.admit(t, k)).reason == base.REQUESTS


async def test_unknown_revoked_and_expired_keys(h):
    t, k = await h.tenant()
    assert (await h.admit(t, "0" * 64)).reason == base.UNAUTHORIZED
    key = await h.store.get_key(k)
    key.expires_at = time.time() - 1
    await h.store.put_key(key)
    assert (await h.admit(t, k)).reason == base.UNAUTHORIZED
    key.expires_at, key.revoked = 0, True
    await h.store.put_key(key)
    assert (await h.admit(t, k)).reason == base.UNAUTHORIZED


async def test_model_allow_list_and_generation(h):
    t, k = await h.tenant(models=["a", "b"])
    a = await h.admit(t, k, model="b")
    assert a.ok and a.tenant_gen == 1
    assert (await h.admit(t, k, model="c")).reason == base.MODEL_NOT_ALLOWED
    tenant = await h.store.get_tenant(t)
    tenant.models = []
    await h.store.put_tenant(tenant)
    again = await h.admit(t, k, model="c")
    assert again.ok and again.tenant_gen == 2


async def test_a_void_settlement_returns_the_reservation_and_the_request_unit(h):
    """An admission whose reply was lost: the gateway never served it, so nothing of it stays taken or counted."""
    t, k = await h.tenant(rpm=2, output_tpm=100, daily_tokens=1000)
    a = await h.admit(t, k, prompt=10, max_tokens=50)
    await h.store.settle(Settlement(t, k, "m", a.request_id, 10, a.reserved_out, 0, 0, a.day, a.month, kind=base.VOID))
    b = await h.admit(t, k, prompt=10, max_tokens=50)
    assert b.buckets["requests"].remaining == 1 and b.buckets["output_tokens"].remaining == 50
    assert b.headroom["daily_tokens"] == (1000, 940)
    assert a.day not in await h.store.usage(t, [a.day])


async def test_a_record_settlement_counts_usage_and_spend_once(h):
    """A request served on a gateway's local buckets while Redis was down is recorded when it is back: usage and
    budget spend, no bucket (that minute has passed); a resend after a lost reply counts nothing more (Redis)."""
    t, k = await h.tenant(output_tpm=100, daily_tokens=1000)
    first = await h.admit(t, k, prompt=1, max_tokens=1)
    day = first.day
    record = Settlement(t, k, "m", "fallback-1", 0, 0, 30, 20, day, first.month, kind=base.RECORD)
    await h.store.settle(record)
    if h.kind == "redis":
        await h.store.settle(Settlement(**{**record.__dict__, "replay": True}))
    usage = (await h.store.usage(t, [day]))[day]
    assert (usage["requests"], usage["input_tokens"], usage["output_tokens"]) == (1, 30, 20)
    after = await h.admit(t, k, prompt=10, max_tokens=10)
    assert after.headroom["daily_tokens"] == (1000, 1000 - 2 - 50 - 20)
    assert after.buckets["output_tokens"].remaining == 100 - 1 - 10


async def test_usage_per_model_and_key(h):
    t, k = await h.tenant()
    a = await h.admit(t, k, prompt=7, max_tokens=9)
    await h.settle(t, k, a, actual_in=7, actual_out=5)
    usage = await h.store.usage(t, [a.day])
    day = usage[a.day]
    assert (day["requests"], day["input_tokens"], day["output_tokens"]) == (1, 7, 5)
    assert day["model:m:output_tokens"] == 5
    assert day[f"key:{key_id_of(k)}:input_tokens"] == 7


async def test_a_tenant_created_again_after_delete_is_a_new_one(h):
    """Deleting a tenant takes its buckets (its own and its keys') and its usage with it."""
    t, k = await h.tenant(rpm=1)
    a = await h.admit(t, k)
    await h.settle(t, k, a, actual_in=10, actual_out=3)
    assert (await h.admit(t, k)).reason == base.REQUESTS
    assert await h.store.delete_tenant(t)
    await h.store.put_tenant(Tenant(id=t, rpm=1))
    await h.store.put_key(ApiKey(key_id_of(k), t, k))
    assert (await h.admit(t, k)).ok
    assert await h.store.usage(t, [a.day]) == {}


async def test_a_request_of_a_deleted_tenant_settles_nothing_on_the_one_created_again(h):
    """The request was admitted, its tenant deleted and created again under the same id while it ran: its refund
    must not lower the new tenant's spend (a budget below zero is free tokens), nor its usage land there."""
    t, k = await h.tenant(daily_tokens=100)
    a = await h.admit(t, k, prompt=30, max_tokens=40)
    created_ms = (await h.store.get_tenant(t)).created_ms
    assert a.ok and created_ms
    assert await h.store.delete_tenant(t)
    await asyncio.sleep(0.002)  # the new record's stamp is another millisecond's
    await h.store.put_tenant(Tenant(id=t, daily_tokens=100))
    await h.store.put_key(ApiKey(key_id_of(k), t, k))
    await h.settle(t, k, a, actual_in=30, actual_out=5, tenant_created_ms=created_ms)
    assert await h.store.usage(t, [a.day]) == {}
    assert (await h.admit(t, k, prompt=50, max_tokens=45)).ok
    assert (await h.admit(t, k, prompt=1, max_tokens=10)).reason == base.DAILY_BUDGET


async def test_redis_clock_not_the_gateways(monkeypatch, clean_redis):
    """The script refills by Redis TIME: a gateway whose clock jumps an hour ahead gets no extra tokens."""
    h = Harness("redis")
    try:
        t, k = await h.tenant(rpm=1)
        assert (await h.admit(t, k)).ok
        real_time = time.time
        monkeypatch.setattr(time, "time", lambda: real_time() + 3600)
        monkeypatch.setattr(time, "time_ns", lambda: int((real_time() + 3600) * 1e9))
        assert (await h.admit(t, k)).reason == base.REQUESTS
    finally:
        await h.store.delete_tenant(t)
        await h.store.close()
