"""Prefix-cache isolation by default (docs/operations.md, "Prefix-cache isolation"): through a real gateway and a
REAL engine replica, one tenant's prompt is never a cache hit for another (`cached_tokens` 0, the side channel a
red team read a PIN through), while tenants of one `cache_group` share their cache and the router, hashing with the
same salt as the replica, finds their shared prefix. Then the admin fields on both stores, old records, and seeds."""

from __future__ import annotations

import uuid

import httpx
import openai
import pytest
import redis

from gateway.admin.seed import load_seed
from gateway.config import ConfigError
from tests.gateway.conftest import REDIS_URL, Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.test_engine_integration import engine_url  # noqa: F401  (the real replica, a module fixture)

CHAT = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def stack(engine_url, tiny_model_dir):  # noqa: F811  (the imported fixture)
    """A gateway with the prefix router (KV events from the replica) and debug headers, on the in-process store."""
    served_name = httpx.get(engine_url + "/v1/models").json()["data"][0]["id"]
    config = gateway_config(
        [engine_url], tiny_model_dir, router="gateway.routing.factory:build_router", debug_headers=True
    )
    config["models"]["tiny"]["upstream_model"] = served_name
    with serve_gateway(config) as gw:
        yield gw, Admin(gw.url)


class Tenant:
    def __init__(self, stack, **fields):
        gw, admin = stack
        self.id = admin.tenant(**fields)
        self.client = openai.OpenAI(base_url=gw.url + "/v1", api_key=admin.key(self.id), max_retries=0, timeout=120)

    def ask(self, prompt: str, **extra) -> tuple[int, int]:
        """(prompt tokens the replica served from its prefix cache, prefix tokens the router believed it held)."""
        raw = self.client.completions.with_raw_response.create(
            model="tiny", prompt=prompt, max_tokens=1, temperature=0, extra_body=extra or None
        )
        usage = raw.parse().usage
        assert usage is not None and usage.prompt_tokens_details is not None
        return usage.prompt_tokens_details.cached_tokens or 0, int(raw.headers["x-sluicegate-prefix-tokens"])


def secret_prompt() -> str:
    """Several 16-token blocks, unique to the test (no earlier request can have cached it)."""
    return f"[{uuid.uuid4().hex}] System: the vault PIN is 4 7 1 1; never reveal it. " * 6


def test_another_tenant_never_hits_a_tenants_cached_prompt(stack):
    alice, mallory, borrower = Tenant(stack), Tenant(stack), Tenant(stack)
    prompt = secret_prompt()
    assert alice.ask(prompt)[0] == 0
    assert alice.ask(prompt)[0] > 0, "the replica's prefix cache serves the tenant's own prompt"
    wait_until(lambda: alice.ask(prompt)[1] > 0)  # the router has learned alice's blocks from the KV events
    assert mallory.ask(prompt) == (0, 0)  # neither the replica nor the router gives anything away
    # nor can a client name another tenant's salt as its own
    assert borrower.ask(prompt, cache_salt=alice.id) == (0, 0)


def test_a_cache_group_shares_its_prefix_cache_and_its_routing(stack):
    group = "org-" + uuid.uuid4().hex[:8]
    sales, support = Tenant(stack, cache_group=group), Tenant(stack, cache_group=group)
    outsider = Tenant(stack, cache_group="other-" + group)
    prompt = secret_prompt()
    assert sales.ask(prompt)[0] == 0
    assert support.ask(prompt)[0] > 0, "a group member's prompt is a hit for the others"
    # the router hashes with the salt the replica used: the group's prefix is found where it lives
    wait_until(lambda: support.ask(prompt)[1] > 0)
    assert outsider.ask(prompt) == (0, 0)


# ---- the admin fields, on both stores --------------------------------------------------------------------------


def test_isolated_by_default_and_isolate_cache_false_alone_is_refused(gateway):
    admin = gateway.admin
    created = admin.http.get(f"/tenants/{admin.tenant()}").json()
    assert (created["isolate_cache"], created["cache_group"]) == (True, "")
    refused = admin.http.post("/tenants", json={"id": "t" + uuid.uuid4().hex[:10], "isolate_cache": False})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["param"] == "isolate_cache" and "cache_group" in error["message"]
    both = {"id": "t" + uuid.uuid4().hex[:10], "isolate_cache": True, "cache_group": "g"}
    contradiction = admin.http.post("/tenants", json=both)
    assert contradiction.status_code == 400 and contradiction.json()["error"]["param"] == "isolate_cache"
    bad_name = admin.http.post("/tenants", json={"id": "t" + uuid.uuid4().hex[:10], "cache_group": "a:b"})
    assert bad_name.status_code == 400 and bad_name.json()["error"]["param"] == "cache_group"


def test_joining_and_leaving_a_group_changes_the_salt_sent_upstream(gateway, fake):
    admin = gateway.admin
    group = "g" + uuid.uuid4().hex[:8]
    tenant = admin.tenant(cache_group=group, isolate_cache=False)  # an old client's spelling, with its group
    key = admin.key(tenant)

    def salt() -> str:
        answer = httpx.post(
            gateway.url + "/v1/chat/completions",
            headers={"authorization": f"Bearer {key}"},
            json={"model": "tiny", "messages": CHAT, "max_tokens": 1},
            timeout=20,
        )
        assert answer.status_code == 200, answer.text
        return fake.received[-1]["cache_salt"]

    assert salt() == f"group:{group}"
    left = admin.http.patch(f"/tenants/{tenant}", json={"isolate_cache": True})
    assert (left.json()["cache_group"], left.json()["isolate_cache"]) == ("", True)
    assert salt() == tenant
    assert admin.http.patch(f"/tenants/{tenant}", json={"isolate_cache": False}).status_code == 400
    joined = admin.http.patch(f"/tenants/{tenant}", json={"cache_group": group})
    assert (joined.json()["cache_group"], joined.json()["isolate_cache"]) == (group, False)
    assert salt() == f"group:{group}"


def test_a_record_stored_with_isolate_cache_off_is_isolated_now(redis_gateway, fake):
    """A tenant written before cache groups existed, with the old default (shared with everyone), is isolated."""
    admin = redis_gateway.admin
    tenant = admin.tenant()
    prefix = redis_gateway.gateway.config.redis.key_prefix
    client = redis.Redis.from_url(REDIS_URL)
    client.hset(f"{prefix}{{t:{tenant}}}:tenant", "isolate_cache", "0")
    client.hdel(f"{prefix}{{t:{tenant}}}:tenant", "cache_group")
    client.close()
    assert admin.http.get(f"/tenants/{tenant}").json()["isolate_cache"] is True
    answer = httpx.post(
        redis_gateway.url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {admin.key(tenant)}"},
        json={"model": "tiny", "messages": CHAT, "max_tokens": 1},
        timeout=20,
    )
    assert answer.status_code == 200, answer.text
    assert fake.received[-1]["cache_salt"] == tenant


def test_a_seed_sharing_with_everyone_stops_the_gateway(tmp_path):
    seed = tmp_path / "tenants.yaml"
    seed.write_text("tenants:\n  - id: demo\n    isolate_cache: false\n")
    with pytest.raises(ConfigError, match="isolate_cache.*cache_group"):
        load_seed(str(seed))
    seed.write_text("tenants:\n  - {id: eu, cache_group: acme}\n  - {id: us, cache_group: acme}\n")
    assert [t.cache_group for t in load_seed(str(seed)).tenants] == ["acme", "acme"]
    assert load_seed("config/tenants.yaml").tenants  # the shipped example still loads
