"""The admin API and CLI: round trips, validation, and changes that take effect on the next request on every
gateway instance sharing the Redis."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from gateway.admin import cli as admin_cli
from tests.gateway.conftest import ADMIN_TOKEN, PREFIX, REDIS_URL, Admin, gateway_config, serve_gateway

CHAT = [{"role": "user", "content": "hi"}]


def chat(gw, key: str, **extra) -> httpx.Response:
    return httpx.post(
        gw.url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
        json={"model": "tiny", "messages": CHAT, "max_tokens": 1, **extra},
    )


@pytest.fixture(scope="module")
def pair(fake, tokenizer_dir, clean_redis):
    """Two gateway instances sharing one Redis key space, serving `tiny` and `other`."""
    config = gateway_config([fake.url], tokenizer_dir, REDIS_URL, prefix=PREFIX + "admin-pair:")
    config["models"]["other"] = dict(config["models"]["tiny"])
    with serve_gateway(config) as one, serve_gateway(config) as two:
        yield one, two, Admin(one.url)


def test_tenant_round_trip(pair):
    _, _, admin = pair
    http = admin.http
    tenant = admin.tenant("acme-rt", rpm=10, models=["tiny"], isolate_cache=True)
    assert http.get(f"/tenants/{tenant}").json()["rpm"] == 10
    assert http.post("/tenants", json={"id": tenant}).status_code == 409
    updated = http.patch(f"/tenants/{tenant}", json={"rpm": 20, "daily_tokens": 5000}).json()
    assert (updated["rpm"], updated["daily_tokens"], updated["models"]) == (20, 5000, ["tiny"])
    assert tenant in [t["id"] for t in http.get("/tenants").json()["data"]]
    assert http.delete(f"/tenants/{tenant}").json()["deleted"] is True
    assert http.get(f"/tenants/{tenant}").status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"id": "bad id!"},
        {"id": "x1", "rpm": -1},
        {"id": "x2", "rpm": "many"},
        {"id": "x3", "nonsense": 1},
        {"id": "x4", "models": "tiny"},
        {"id": "x5", "isolate_cache": "yes"},
        {"id": "x6", "guardrails": "strict"},
        {"id": ".."},
        {"id": "."},
        {"id": "x7", "rpm": 2**63},
        {"id": "x8", "daily_tokens": 2**48 + 1},
        {"id": "x9", "default_max_tokens": 0},
    ],
)
def test_tenant_validation(pair, body):
    _, _, admin = pair
    response = admin.http.post("/tenants", json=body)
    assert response.status_code == 400 and response.json()["error"]["message"]


def test_without_guardrails_the_only_policy_is_off(pair):
    """No `guardrails` section: a tenant naming a policy would get no checks at all, so the name is refused."""
    _, _, admin = pair
    tenant = admin.tenant(guardrails="off")
    response = admin.http.patch(f"/tenants/{tenant}", json={"guardrails": "strict"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("guardrail_policy_unknown", "guardrails")
    assert "'strict'" in error["message"] and "without guardrails" in error["message"]


def test_allowed_models_must_be_served_ones(pair):
    """A typo in a tenant's models would leave it able to use nothing, silently: the admin API refuses it."""
    _, _, admin = pair
    tenant = admin.tenant(models=["tiny"])
    for response in (
        admin.http.patch(f"/tenants/{tenant}", json={"models": ["tiny", "tinny"]}),
        admin.http.post("/tenants", json={"id": tenant + "-2", "models": ["tinny"]}),
    ):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["code"], error["param"]) == ("model_not_served", "models")
        assert "tinny" in error["message"] and "['other', 'tiny']" in error["message"]
    assert admin.http.get(f"/tenants/{tenant}").json()["models"] == ["tiny"]
    assert admin.http.get(f"/tenants/{tenant}-2").status_code == 404


def test_a_usd_budget_needs_a_priced_model(pair):
    """This gateway's models have no price, so a budget in US dollars would count nothing and never apply: the admin
    API says so instead of storing it (tests/gateway/test_spend.py runs budgets on priced models)."""
    _, _, admin = pair
    tenant = admin.tenant()
    for response in (
        admin.http.patch(f"/tenants/{tenant}", json={"daily_budget_usd": 5}),
        admin.http.post("/tenants", json={"id": tenant + "-2", "monthly_budget_usd": 50}),
    ):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "budget_without_price" and "price" in error["message"]
        assert error["param"] in ("daily_budget_usd", "monthly_budget_usd")
    assert admin.http.get(f"/tenants/{tenant}").json()["daily_budget_usd"] == 0
    assert admin.http.patch(f"/tenants/{tenant}", json={"daily_budget_usd": 0}).status_code == 200


def test_tenant_writes_racing_each_other_all_land(pair):
    """Each PATCH writes only its own fields in one store step: concurrent PATCHes of different fields and a
    second create of the same id lose nothing (a whole-record write-back would keep only the last)."""
    one, two, admin = pair
    headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}

    async def race(tenant: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(headers=headers, timeout=30) as http:
            path = f"/admin/v1/tenants/{tenant}"
            return await asyncio.gather(
                http.patch(one.url + path, json={"rpm": 11}),
                http.patch(two.url + path, json={"daily_tokens": 22}),
                http.patch(one.url + path, json={"models": ["other"]}),
                http.post(two.url + "/admin/v1/tenants", json={"id": tenant}),
            )

    for _ in range(10):
        tenant = admin.tenant()
        replies = asyncio.run(race(tenant))
        assert [r.status_code for r in replies] == [200, 200, 200, 409]
        record = admin.http.get(f"/tenants/{tenant}").json()
        assert (record["rpm"], record["daily_tokens"], record["models"], record["gen"]) == (11, 22, ["other"], 4)


def test_admin_auth(pair):
    one, _, _ = pair
    assert httpx.get(one.url + "/admin/v1/tenants").status_code == 401
    assert httpx.get(one.url + "/admin/v1/tenants", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(one.url + "/admin/v1/tenants", headers={"authorization": ADMIN_TOKEN}).status_code == 401
    # The scheme is case-insensitive (RFC 9110), as it is for API keys.
    assert (
        httpx.get(one.url + "/admin/v1/tenants", headers={"authorization": f"bearer {ADMIN_TOKEN}"}).status_code == 200
    )


@pytest.mark.parametrize(
    "body",
    [
        {"ttl_s": 1e400},
        {"ttl_s": 0},
        {"expires_at": 1e300},
        {"rpm": 2**60},
        {"expires_at": 1},  # already expired
        {"expires_at": 9_999_999_999, "ttl_s": 5},  # which one?
        {"name": "n" * 100_000},
    ],
)
def test_key_validation(pair, body):
    _, _, admin = pair
    tenant = admin.tenant()
    response = admin.http.post(
        f"/tenants/{tenant}/keys",
        content=json.dumps(body).replace("Infinity", "1e400"),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400 and response.json()["error"]["message"]


def test_keys_issue_list_revoke_rotate_expire(pair):
    one, two, admin = pair
    http = admin.http
    tenant = admin.tenant()
    issued = http.post(f"/tenants/{tenant}/keys", json={"name": "dev", "rpm": 5}).json()
    key, key_id = issued["key"], issued["key_id"]
    listed = http.get(f"/tenants/{tenant}/keys").json()["data"]
    assert [k["key_id"] for k in listed] == [key_id] and "key" not in listed[0] and "digest" not in listed[0]
    assert chat(one, key).status_code == 200 and chat(two, key).status_code == 200

    rotated = http.post(f"/tenants/{tenant}/keys/{key_id}/rotate", json={"grace_s": 0}).json()  # no grace
    assert rotated["key"] != key and rotated["rpm"] == 5 and rotated["name"] == "dev"
    assert chat(one, key).status_code == 401 and chat(two, key).status_code == 401  # the next request, both
    assert chat(one, rotated["key"]).status_code == 200

    assert http.post(f"/tenants/{tenant}/keys/{rotated['key_id']}/revoke").json()["revoked"] is True
    assert chat(two, rotated["key"]).status_code == 401
    # Rotating a revoked key would hand back the access its revocation took away.
    refused = http.post(f"/tenants/{tenant}/keys/{rotated['key_id']}/rotate", json={})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "key_revoked"

    short = http.post(f"/tenants/{tenant}/keys", json={"ttl_s": 0.5}).json()
    assert chat(one, short["key"]).status_code == 200
    time.sleep(0.6)
    assert chat(one, short["key"]).status_code == 401
    assert http.post(f"/tenants/{tenant}/keys/k_nothing/revoke").status_code == 404


def test_rotation_with_grace(pair):
    one, _, admin = pair
    tenant = admin.tenant()
    issued = admin.http.post(f"/tenants/{tenant}/keys", json={}).json()
    rotated = admin.http.post(f"/tenants/{tenant}/keys/{issued['key_id']}/rotate", json={"grace_s": 60}).json()
    assert chat(one, issued["key"]).status_code == 200  # still inside its grace period
    assert chat(one, rotated["key"]).status_code == 200


def test_limit_changes_apply_on_the_next_request_everywhere(pair):
    one, two, admin = pair
    tenant = admin.tenant(rpm=1000)
    key = admin.key(tenant)
    assert chat(one, key).status_code == 200 and chat(two, key).status_code == 200  # both have it cached
    admin.http.patch(f"/tenants/{tenant}", json={"models": ["other"]})
    assert chat(one, key).status_code == 403 and chat(two, key).status_code == 403
    admin.http.patch(f"/tenants/{tenant}", json={"models": [], "max_tokens_unknown": 1})  # rejected: 400
    admin.http.patch(f"/tenants/{tenant}", json={"models": [], "output_tpm": 5})
    assert chat(one, key, max_tokens=6).status_code == 429 and chat(two, key, max_tokens=6).status_code == 429
    admin.http.patch(f"/tenants/{tenant}", json={"output_tpm": 0, "isolate_cache": True})
    assert chat(two, key, max_tokens=6).status_code == 200
    admin.http.delete(f"/tenants/{tenant}")
    assert chat(one, key).status_code == 401 and chat(two, key).status_code == 401


def test_a_raised_limit_lifts_a_refusal_on_the_next_request_here_and_within_a_second_elsewhere(pair):
    """A refused key is refused locally for a while without asking Redis (the cheap pre-check); an admin change
    must not wait that out: the instance that took it drops its refusal at once, the other asks Redis again within
    PRECHECK_MAX_S."""
    one, two, admin = pair
    tenant = admin.tenant(rpm=1)
    key = admin.key(tenant)
    assert chat(one, key).status_code == 200
    assert chat(one, key).status_code == 429 and chat(two, key).status_code == 429  # both hold a refusal now
    assert admin.http.patch(f"/tenants/{tenant}", json={"rpm": 1000}).status_code == 200  # through `one`
    assert chat(one, key).status_code == 200
    started = time.monotonic()
    while chat(two, key).status_code == 429:
        assert time.monotonic() - started < 5, "the other instance kept its refusal"
        time.sleep(0.05)


def test_a_key_extended_elsewhere_works_again(pair):
    """A key an instance has cached as expired is looked up again (at once where the change was made, within
    DEAD_KEY_RECHECK_S elsewhere), so extending it does not need a gateway restart."""
    one, two, admin = pair
    tenant = admin.tenant()
    # Long enough for both first requests on a loaded machine (each may take a few hundred ms), then wait it out.
    issued = admin.http.post(f"/tenants/{tenant}/keys", json={"ttl_s": 3}).json()
    assert chat(one, issued["key"]).status_code == 200 and chat(two, issued["key"]).status_code == 200
    time.sleep(max(0.0, issued["expires_at"] - time.time()) + 0.1)
    assert chat(one, issued["key"]).status_code == 401 and chat(two, issued["key"]).status_code == 401
    extended = admin.http.patch(f"/tenants/{tenant}/keys/{issued['key_id']}", json={"expires_at": 0})
    assert extended.status_code == 200
    assert chat(one, issued["key"]).status_code == 200
    started = time.monotonic()
    while chat(two, issued["key"]).status_code == 401:
        assert time.monotonic() - started < 5, "the other instance kept the key dead"
        time.sleep(0.05)


def test_usage_report(pair):
    one, two, admin = pair
    tenant = admin.tenant()
    key = admin.key(tenant)
    chat(one, key, fake={"tokens": 2, "prompt_tokens": 5})
    chat(two, key, fake={"tokens": 3, "prompt_tokens": 5})
    deadline = time.monotonic() + 10
    while admin.usage(tenant)["requests"] < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    day = admin.usage(tenant)
    assert (day["requests"], day["input_tokens"], day["output_tokens"]) == (2, 10, 5)
    assert day["by_model"] == {"tiny": {"requests": 2, "input_tokens": 10, "output_tokens": 5}}
    assert list(day["by_key"].values()) == [{"requests": 2, "input_tokens": 10, "output_tokens": 5}]
    assert admin.http.get(f"/tenants/{tenant}/usage?days=0").status_code == 400


def test_cli_round_trip(pair, capsys):
    one, _, _ = pair
    base = ["--url", one.url, "--token", ADMIN_TOKEN]
    assert (
        admin_cli.main(
            base
            + [
                "tenants",
                "create",
                "cli-t",
                "--set",
                "rpm=7",
                "--set",
                "models=tiny,other",
                "--set",
                "isolate_cache=true",
            ]
        )
        == 0
    )
    created = json.loads(capsys.readouterr().out)
    assert (created["rpm"], created["models"], created["isolate_cache"]) == (7, ["tiny", "other"], True)
    assert admin_cli.main(base + ["keys", "create", "cli-t", "--name", "ops", "--ttl-s", "3600"]) == 0
    key = json.loads(capsys.readouterr().out)
    assert key["key"].startswith("sk-sg-") and key["expires_at"] > time.time()
    response = chat(one, key["key"])
    assert response.status_code == 200, response.text
    assert admin_cli.main(base + ["keys", "revoke", "cli-t", key["key_id"]]) == 0
    capsys.readouterr()
    assert chat(one, key["key"]).status_code == 401
    assert admin_cli.main(base + ["usage", "cli-t"]) == 0
    assert json.loads(capsys.readouterr().out)["tenant"] == "cli-t"
    assert admin_cli.main(base + ["tenants", "get", "nobody"]) == 1
    assert "404" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="true or false"):
        admin_cli.main(base + ["tenants", "update", "cli-t", "--set", "isolate_cache=maybe"])
    assert admin_cli.main(base + ["keys", "create", "cli-t", "--ttl-s", "0"]) == 1  # refused, not "never expires"
    assert "ttl_s" in capsys.readouterr().err
    assert admin_cli.main(base + ["tenants", "get", "a/../../x"]) == 1  # one path segment, whatever it holds
    assert "404" in capsys.readouterr().err
    assert admin_cli.main(base + ["tenants", "delete", "cli-t"]) == 0


def test_a_seed_allowing_a_model_the_gateway_does_not_serve_exits_2(tmp_path, capsys):
    from gateway import cli as gateway_cli

    seed = tmp_path / "tenants.yaml"
    seed.write_text("tenants:\n  - id: acme\n    models: [tiny, tinny]\n")
    config = tmp_path / "gateway.yaml"
    config.write_text(f"port: 0\ntenants_seed: {seed}\nmodels:\n  tiny:\n    replicas: ['http://127.0.0.1:9']\n")
    assert gateway_cli.main(["--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert str(seed) in err and "['tinny'] are not served" in err and "served: ['tiny']" in err
