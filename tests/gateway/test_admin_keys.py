"""Key administration: rotation grace and expiry, expired keys staying dead, delete, `keys update`, and admin writes
that race each other (a revocation must never be undone by a PATCH or a rotation that read the record before it)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from gateway.admin import cli as admin_cli
from tests.gateway.conftest import ADMIN_TOKEN, PREFIX, REDIS_URL, Admin, gateway_config, serve_gateway

CHAT = [{"role": "user", "content": "hi"}]
RACE_TRIES = 30
DAY_S = 86_400


def chat(gw, key: str) -> httpx.Response:
    return httpx.post(
        gw.url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
        json={"model": "tiny", "messages": CHAT, "max_tokens": 1},
    )


def models(gw, key: str) -> httpx.Response:
    return httpx.get(gw.url + "/v1/models", headers={"authorization": f"Bearer {key}"}, timeout=30)


@pytest.fixture(scope="module")
def redis_pair(fake, tokenizer_dir, clean_redis):
    """Two gateway instances sharing one Redis key space: admin writes go through both at once."""
    config = gateway_config([fake.url], tokenizer_dir, REDIS_URL, prefix=PREFIX + "admin-keys:")
    with serve_gateway(config) as one, serve_gateway(config) as two:
        yield one, two


@pytest.fixture(scope="module")
def local_one(fake, tokenizer_dir):
    with serve_gateway(gateway_config([fake.url], tokenizer_dir)) as one:
        yield one


@pytest.fixture(params=["redis", "local"])
def gateways(request):
    """(where admin writes go, the other instance): the same gateway twice for the in-process store."""
    if request.param == "redis":
        return request.getfixturevalue("redis_pair")
    one = request.getfixturevalue("local_one")
    return one, one


def issue(admin: Admin, tenant: str, **fields) -> dict:
    response = admin.http.post(f"/tenants/{tenant}/keys", json=fields)
    assert response.status_code == 201, response.text
    return response.json()


def test_rotation_keeps_the_expiry_and_gives_a_day_of_grace_by_default(gateways):
    one, two = gateways
    admin = Admin(one.url)
    tenant = admin.tenant()
    old = issue(admin, tenant, name="ci", ttl_s=2 * DAY_S, rpm=9)
    before = time.time()
    new = admin.http.post(f"/tenants/{tenant}/keys/{old['key_id']}/rotate", json={}).json()
    assert new["expires_at"] == old["expires_at"] and (new["name"], new["rpm"]) == ("ci", 9)
    listed = {k["key_id"]: k for k in admin.http.get(f"/tenants/{tenant}/keys").json()["data"]}
    assert before + DAY_S - 5 <= listed[old["key_id"]]["expires_at"] <= time.time() + DAY_S
    assert not listed[old["key_id"]]["revoked"]
    assert chat(two, old["key"]).status_code == 200 and chat(two, new["key"]).status_code == 200

    # A grace longer than what the key had left does not extend it; grace 0 ends it at once.
    short = issue(admin, tenant, ttl_s=60)
    rotated = admin.http.post(f"/tenants/{tenant}/keys/{short['key_id']}/rotate", json={"grace_s": DAY_S}).json()
    listed = {k["key_id"]: k for k in admin.http.get(f"/tenants/{tenant}/keys").json()["data"]}
    assert listed[short["key_id"]]["expires_at"] == short["expires_at"] == rotated["expires_at"]
    now = issue(admin, tenant)
    admin.http.post(f"/tenants/{tenant}/keys/{now['key_id']}/rotate", json={"grace_s": 0})
    assert chat(two, now["key"]).status_code == 401


def test_an_expired_key_cannot_be_rotated_back_to_life(gateways):
    one, two = gateways
    admin = Admin(one.url)
    tenant = admin.tenant()
    short = issue(admin, tenant, ttl_s=0.3)
    time.sleep(0.4)
    refused = admin.http.post(f"/tenants/{tenant}/keys/{short['key_id']}/rotate", json={})
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["param"]) == ("key_expired", "key_id") and "expired" in error["message"]
    assert [k["key_id"] for k in admin.http.get(f"/tenants/{tenant}/keys").json()["data"]] == [short["key_id"]]
    bad = admin.http.post(f"/tenants/{tenant}/keys/{short['key_id']}/rotate", json={"grace_s": -1})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "grace_s"


def test_admin_bodies_that_cannot_be_stored_are_4xx_errors(gateways):
    """Found by an operator trial: JSON nested past the parser's depth was a 500; a key name with control characters
    reached the console's HTML; a model listed twice was stored twice; a 40 MB body was read whole."""
    one, _ = gateways
    admin = Admin(one.url)
    tenant = admin.tenant()
    deep = b'{"id": "deep", "rpm": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    for path in ("/tenants", f"/tenants/{tenant}", f"/tenants/{tenant}/keys"):
        method = admin.http.patch if path == f"/tenants/{tenant}" else admin.http.post
        response = method(path, content=deep, headers={"content-type": "application/json"})
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json", response.text
    named = admin.http.post(f"/tenants/{tenant}/keys", json={"name": "a\u0000b\u001b[31m"})
    assert named.status_code == 400 and named.json()["error"]["param"] == "name", named.text
    twice = admin.http.post("/tenants", json={"id": "twice-" + tenant, "models": ["tiny", "tiny"]})
    assert twice.status_code == 400 and twice.json()["error"]["param"] == "models", twice.text
    big = admin.http.post("/tenants", content=b'{"id": "big", "rpm": 1' + b" " * (2 << 20) + b"}")
    assert big.status_code == 413, big.text
    no_id = admin.http.post("/tenants", json={})
    assert no_id.status_code == 400 and "Missing required parameter: 'id'" in no_id.json()["error"]["message"]


def test_delete_key(gateways):
    one, two = gateways
    admin = Admin(one.url)
    tenant = admin.tenant()
    kept, gone = issue(admin, tenant), issue(admin, tenant)
    assert chat(two, gone["key"]).status_code == 200  # cached by the other instance
    deleted = admin.http.delete(f"/tenants/{tenant}/keys/{gone['key_id']}")
    assert deleted.status_code == 200 and deleted.json() == {"key_id": gone["key_id"], "deleted": True}
    assert chat(two, gone["key"]).status_code == 401 and chat(one, gone["key"]).status_code == 401
    assert [k["key_id"] for k in admin.http.get(f"/tenants/{tenant}/keys").json()["data"]] == [kept["key_id"]]
    again = admin.http.delete(f"/tenants/{tenant}/keys/{gone['key_id']}")
    assert again.status_code == 404 and again.json()["error"]["code"] == "key_not_found"
    # A PATCH that lost the race with the delete must not bring back half a record.
    assert admin.http.patch(f"/tenants/{tenant}/keys/{gone['key_id']}", json={"name": "x"}).status_code == 404


def test_a_revoked_key_is_refused_by_v1_models_on_every_instance_at_once(gateways):
    one, two = gateways
    admin = Admin(one.url)
    tenant = admin.tenant()
    key = issue(admin, tenant)
    assert models(two, key["key"]).status_code == 200  # the other instance has it cached now
    admin.http.post(f"/tenants/{tenant}/keys/{key['key_id']}/revoke")
    assert models(two, key["key"]).status_code == 401
    assert httpx.get(two.url + "/v1/models/tiny", headers={"authorization": f"Bearer {key['key']}"}).status_code == 401


async def _race(urls: list[str], tenant: str, key_id: str) -> list[httpx.Response]:
    """A revoke, a PATCH and a rotation sent at the same moment, through different instances."""
    headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        path = f"/admin/v1/tenants/{tenant}/keys/{key_id}"
        return await asyncio.gather(
            http.patch(urls[0] + path, json={"name": "renamed", "rpm": 100}),
            http.post(urls[1 % len(urls)] + path + "/revoke"),
            http.post(urls[0] + path + "/rotate", json={"grace_s": 3600}),
            http.patch(urls[1 % len(urls)] + path, json={"expires_at": time.time() + 7200}),
        )


def test_a_revocation_racing_patches_and_a_rotation_stays(gateways):
    one, two = gateways
    admin = Admin(one.url)
    tenant = admin.tenant()
    lost = []
    for attempt in range(RACE_TRIES):
        key = issue(admin, tenant, name=f"race-{attempt}")
        replies = asyncio.run(_race([one.url, two.url], tenant, key["key_id"]))
        assert replies[1].status_code == 200 and replies[1].json()["revoked"] is True
        assert replies[2].status_code in (201, 409), replies[2].text  # rotated first, or refused as revoked
        record = {k["key_id"]: k for k in admin.http.get(f"/tenants/{tenant}/keys").json()["data"]}[key["key_id"]]
        if not record["revoked"] or chat(two, key["key"]).status_code != 401:
            lost.append(attempt)
        assert record["name"] == "renamed" and record["rpm"] == 100  # the PATCH landed too
    assert not lost, f"the revocation was undone in {len(lost)} of {RACE_TRIES} tries"


def test_cli_keys_update_delete_and_rotate(redis_pair, capsys):
    one, _ = redis_pair
    base = ["--url", one.url, "--token", ADMIN_TOKEN]
    tenant = Admin(one.url).tenant()
    assert admin_cli.main(base + ["keys", "create", tenant, "--name", "ops"]) == 0
    key = json.loads(capsys.readouterr().out)
    assert (
        admin_cli.main(
            base
            + ["keys", "update", tenant, key["key_id"], "--set", "rpm=7", "--set", "name=ops2", "--set", "expires_at=0"]
        )
        == 0
    )
    updated = json.loads(capsys.readouterr().out)
    assert (updated["rpm"], updated["name"], updated["expires_at"]) == (7, "ops2", 0)
    assert admin_cli.main(base + ["keys", "rotate", tenant, key["key_id"]]) == 0  # the API's default grace
    rotated = json.loads(capsys.readouterr().out)
    assert chat(one, key["key"]).status_code == 200 and chat(one, rotated["key"]).status_code == 200
    assert admin_cli.main(base + ["keys", "delete", tenant, key["key_id"]]) == 0
    assert json.loads(capsys.readouterr().out)["deleted"] is True
    assert chat(one, key["key"]).status_code == 401
    assert admin_cli.main(base + ["keys", "delete", tenant, key["key_id"]]) == 1
    assert "404" in capsys.readouterr().err
