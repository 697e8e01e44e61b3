"""The console over real HTTP (httpx against real gateways on loopback, Redis-backed): login and logout, the
session cookie's attributes, and that no POST does anything without a valid session and its CSRF token."""

from __future__ import annotations

import httpx
import pytest

from gateway.admin.console.session import COOKIE_NAME
from tests.gateway.admin_console.helpers import console_client, csrf_of, logged_in
from tests.gateway.conftest import ADMIN_TOKEN, REDIS_URL, Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.test_admin_replicas import routed_config


def _exists(gw, tenant_id: str) -> bool:
    return Admin(gw.url).http.get(f"/tenants/{tenant_id}").status_code == 200


def test_pages_need_a_session(redis_gateway):
    client = console_client(redis_gateway.url)
    for path in ("/tenants", "/replicas", "/refusals", "/tenants/anyone"):
        response = client.get(path)
        assert response.status_code == 303
        assert response.headers["location"].startswith("/admin/login?next=")
    assert client.get("/login").status_code == 200
    assert client.get("/").headers["location"] == "/admin/tenants"


def test_a_wrong_token_gets_one_plain_message_and_no_cookie(redis_gateway):
    client = console_client(redis_gateway.url)
    for wrong in ("", "nope", ADMIN_TOKEN + "x", ADMIN_TOKEN[:-1]):
        response = client.post("/login", data={"token": wrong})
        assert response.status_code == 401
        assert "That admin token is not valid." in response.text
        assert COOKIE_NAME not in response.headers.get("set-cookie", "")
        assert ADMIN_TOKEN not in response.text


def test_login_sets_a_strict_httponly_session_cookie_and_logout_ends_it(redis_gateway):
    client = console_client(redis_gateway.url)
    response = client.post("/login", data={"token": ADMIN_TOKEN, "next": "/admin/replicas"})
    assert response.status_code == 303 and response.headers["location"] == "/admin/replicas"
    cookie = response.headers["set-cookie"].lower()
    assert cookie.startswith(COOKIE_NAME + "=")
    for attribute in ("httponly", "samesite=strict", "path=/admin", "max-age="):
        assert attribute in cookie
    page = client.get("/tenants")
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store" and page.headers["x-frame-options"] == "DENY"

    out = client.post("/logout", data={"csrf": csrf_of(page.text)})
    assert out.status_code == 303 and out.headers["location"] == "/admin/login?done=logged_out"
    assert client.get("/tenants").status_code == 303


def test_login_never_redirects_off_the_console(redis_gateway):
    client = console_client(redis_gateway.url)
    for target in ("https://evil.example/", "//evil.example/admin/", "/v1/models", "/admin\\@evil"):
        response = client.post("/login", data={"token": ADMIN_TOKEN, "next": target})
        assert response.headers["location"] == "/admin/tenants", target


def test_a_post_without_a_session_is_refused_and_changes_nothing(redis_gateway):
    client = console_client(redis_gateway.url)
    response = client.post("/tenants", data={"id": "no-session", "rpm": "5", "csrf": "anything"})
    assert response.status_code == 401
    assert not _exists(redis_gateway, "no-session")
    client.cookies.set(COOKIE_NAME, "v1.99999999999.forged.mac", path="/admin")
    assert client.post("/tenants", data={"id": "forged", "csrf": "x"}).status_code == 401
    assert not _exists(redis_gateway, "forged")


def test_a_post_without_a_valid_csrf_token_is_refused_and_changes_nothing(redis_gateway):
    client, csrf = logged_in(redis_gateway.url)
    other_client, other_csrf = logged_in(redis_gateway.url)
    assert csrf != other_csrf
    for name, data in (
        ("no-csrf", {"id": "no-csrf"}),
        ("empty-csrf", {"id": "empty-csrf", "csrf": ""}),
        ("other-csrf", {"id": "other-csrf", "csrf": other_csrf}),  # another session's token
        ("bad-csrf", {"id": "bad-csrf", "csrf": csrf[:-2]}),
    ):
        response = client.post("/tenants", data=data)
        assert response.status_code == 403, name
        assert "stale" in response.text
        assert not _exists(redis_gateway, data["id"]), name

    created = client.post("/tenants", data={"id": "with-csrf", "rpm": "7", "csrf": csrf})
    assert created.status_code == 303 and created.headers["location"] == "/admin/tenants/with-csrf?done=created"
    assert Admin(redis_gateway.url).http.get("/tenants/with-csrf").json()["rpm"] == 7
    gone = client.post("/tenants/with-csrf/delete", data={"csrf": other_csrf})
    assert gone.status_code == 403 and _exists(redis_gateway, "with-csrf")


def test_a_session_from_one_gateway_works_on_another_with_the_same_token(redis_gateway, fake, tokenizer_dir):
    client, csrf = logged_in(redis_gateway.url)
    with serve_gateway(gateway_config([fake.url], tokenizer_dir, REDIS_URL)) as other:
        second = console_client(other.url)
        second.cookies = client.cookies
        assert second.get("/tenants").status_code == 200
    with serve_gateway({**gateway_config([fake.url], tokenizer_dir), "admin_token": "another-token"}) as foreign:
        third = console_client(foreign.url)
        third.cookies = client.cookies
        assert third.get("/tenants").status_code == 303


def test_bad_input_is_an_error_page_not_a_500(redis_gateway):
    client, csrf = logged_in(redis_gateway.url)
    for data, status, text in (
        ({"id": "bad id!"}, 400, "tenant id must match"),
        ({"id": "t-bad-rpm", "rpm": "lots"}, 400, "rpm must be a number"),
        ({"id": "t-bad-model", "models": "no-such-model"}, 400, "not served"),
        ({"id": "t-bad-policy", "guardrails": "strictest"}, 400, "not defined"),
    ):
        response = client.post("/tenants", data={**data, "csrf": csrf})
        assert response.status_code == status, response.text
        assert text in response.text
    assert client.get("/tenants/does-not-exist").status_code == 404
    assert client.post("/tenants/does-not-exist/keys", data={"csrf": csrf}).status_code == 404
    duplicate = client.post("/tenants", data={"id": "twice", "csrf": csrf})
    assert duplicate.status_code == 303
    assert client.post("/tenants", data={"id": "twice", "csrf": csrf}).status_code == 409


def test_keys_are_issued_once_rotated_revoked_and_deleted(redis_gateway):
    client, csrf = logged_in(redis_gateway.url)
    assert client.post("/tenants", data={"id": "keyed", "csrf": csrf}).status_code == 303
    issued = client.post("/tenants/keyed/keys", data={"name": "ci", "ttl_h": "2", "rpm": "", "csrf": csrf})
    assert issued.status_code == 200 and issued.headers["cache-control"] == "no-store"
    secret = issued.text.split('id="secret">')[1].split("<")[0]
    assert secret.startswith("sk-sg-")
    models = httpx.get(redis_gateway.url + "/v1/models", headers={"authorization": f"Bearer {secret}"})
    assert models.status_code == 200
    page = client.get("/tenants/keyed").text
    assert secret not in page  # shown once
    (key,) = Admin(redis_gateway.url).http.get("/tenants/keyed/keys").json()["data"]
    assert key["name"] == "ci" and key["expires_at"] > 0

    rotated = client.post(f"/tenants/keyed/keys/{key['key_id']}/rotate", data={"grace_s": "0", "csrf": csrf})
    assert rotated.status_code == 200 and "Key rotated" in rotated.text
    new_secret = rotated.text.split('id="secret">')[1].split("<")[0]
    assert new_secret != secret
    auth = {"authorization": f"Bearer {new_secret}"}
    assert httpx.get(redis_gateway.url + "/v1/models", headers=auth).status_code == 200
    old_auth = {"authorization": f"Bearer {secret}"}
    assert httpx.get(redis_gateway.url + "/v1/models", headers=old_auth).status_code == 401  # grace 0: now

    keys = Admin(redis_gateway.url).http.get("/tenants/keyed/keys").json()["data"]
    new_id = next(k["key_id"] for k in keys if k["key_id"] != key["key_id"])
    never = client.post(f"/tenants/keyed/keys/{new_id}/expiry", data={"ttl_h": "", "csrf": csrf})
    assert never.status_code == 303
    keys = {k["key_id"]: k for k in Admin(redis_gateway.url).http.get("/tenants/keyed/keys").json()["data"]}
    assert keys[new_id]["expires_at"] == 0
    limits = {"rpm": "60", "input_tpm": "", "output_tpm": "900", "csrf": csrf}
    assert client.post(f"/tenants/keyed/keys/{new_id}/limits", data=limits).status_code == 303
    keys = {k["key_id"]: k for k in Admin(redis_gateway.url).http.get("/tenants/keyed/keys").json()["data"]}
    assert (keys[new_id]["rpm"], keys[new_id]["input_tpm"], keys[new_id]["output_tpm"]) == (60, 0, 900)
    bad = client.post(f"/tenants/keyed/keys/{new_id}/limits", data={"rpm": "-1", "csrf": csrf})
    assert bad.status_code == 400  # the API's own validation, shown as a page
    assert client.post(f"/tenants/keyed/keys/{new_id}/revoke", data={"csrf": csrf}).status_code == 303
    assert httpx.get(redis_gateway.url + "/v1/models", headers=auth).status_code == 401
    # Only what the API would do is offered: a revoked key can be deleted; an expired one given a new expiry,
    # revoked or deleted, not rotated (409) or limited; an active one everything.
    short = client.post("/tenants/keyed/keys", data={"name": "short", "ttl_h": "", "csrf": csrf})
    assert short.status_code == 200
    short_id = next(k["key_id"] for k in Admin(redis_gateway.url).http.get("/tenants/keyed/keys").json()["data"]
                    if k["name"] == "short")  # fmt: skip
    page = client.get("/tenants/keyed").text
    assert _row_actions(page, short_id) == ["rotate", "limits", "expiry", "revoke", "delete"]
    assert (
        client.post(f"/tenants/keyed/keys/{short_id}/expiry", data={"ttl_h": "0.0001", "csrf": csrf}).status_code == 303
    )
    wait_until(lambda: "expired" in _row(client.get("/tenants/keyed").text, short_id))
    page = client.get("/tenants/keyed").text
    assert _row_actions(page, new_id) == ["delete"]
    assert _row_actions(page, short_id) == ["expiry", "revoke", "delete"]
    assert client.post(f"/tenants/keyed/keys/{short_id}/delete", data={"csrf": csrf}).status_code == 303
    assert client.post(f"/tenants/keyed/keys/{new_id}/delete", data={"csrf": csrf}).status_code == 303
    remaining = Admin(redis_gateway.url).http.get("/tenants/keyed/keys").json()["data"]
    assert [k["key_id"] for k in remaining] == [key["key_id"]]


@pytest.fixture
def routed_gateway(fake, tokenizer_dir):
    with serve_gateway(routed_config([("a", fake.url)], tokenizer_dir)) as gw:
        yield gw


def test_replicas_are_added_drained_and_removed_from_the_console(routed_gateway, fake):
    client, csrf = logged_in(routed_gateway.url)
    page = client.get("/replicas")
    assert page.status_code == 200 and 'id="replica-a"' in page.text
    add = {"model": "tiny", "name": "b", "url": fake.url, "csrf": csrf}
    assert client.post("/replicas/add", data=add).status_code == 303
    api = Admin(routed_gateway.url).http
    assert {r["name"]: r["state"] for r in api.get("/models/tiny/replicas").json()["data"]} == {
        "a": "active",
        "b": "active",
    }
    assert client.post("/replicas/add", data={**add, "url": "http://127.0.0.1:1"}).status_code == 409
    assert client.post("/replicas/add", data={**add, "name": "c", "url": "not a url"}).status_code == 400
    assert client.post("/replicas/drain", data={"model": "tiny", "name": "b", "csrf": csrf}).status_code == 303
    assert {r["name"]: r["state"] for r in api.get("/models/tiny/replicas").json()["data"]}["b"] == "draining"
    assert client.post("/replicas/remove", data={"model": "tiny", "name": "b", "csrf": csrf}).status_code == 303
    assert [r["name"] for r in api.get("/models/tiny/replicas").json()["data"]] == ["a"]
    assert client.post("/replicas/drain", data={"model": "tiny", "name": "zz", "csrf": csrf}).status_code == 404
    assert client.post("/replicas/drain", data={"model": "nope", "name": "a", "csrf": csrf}).status_code == 404
    assert client.post("/replicas/drain", data={"model": "tiny", "name": "a"}).status_code == 403


def _row(page: str, key_id: str) -> str:
    return page.split(f'<tr id="key-{key_id}">')[1].split("</tr>")[0]


def _row_actions(page: str, key_id: str) -> list[str]:
    """The actions (the last path segment of each form) offered in a key's row of the tenant page."""
    return [action.split('"')[0] for action in _row(page, key_id).split(f"/keys/{key_id}/")[1:]]
