"""The admin audit log: every admin change as one JSON line on `sluicegate.audit`, with the record before and after
(keys by id and digest, never the plaintext or the admin token), when, and the admin client's address. A real
gateway on loopback with the prefix router (replica pools are changeable), driven over HTTP like an operator."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from gateway.admin.audit import AUDIT_LOGGER
from tests.gateway.conftest import ADMIN_TOKEN, Admin, serve_gateway
from tests.gateway.test_admin_replicas import routed_config
from tests.log_capture import captured


@pytest.fixture(scope="module")
def gw(fake, tokenizer_dir):
    with serve_gateway(routed_config([("r0", fake.url)], tokenizer_dir)) as server:
        server.admin = Admin(server.url)
        yield server


def test_tenant_and_key_changes_are_audited(gw):
    http = gw.admin.http
    with captured(AUDIT_LOGGER) as lines:
        assert http.post("/tenants", json={"id": "audited", "rpm": 10}).status_code == 201
        assert http.patch("/tenants/audited", json={"rpm": 20}).status_code == 200
        created = http.post("/tenants/audited/keys", json={"name": "ci"}).json()
        key_id, plaintext = created["key_id"], created["key"]
        assert http.patch(f"/tenants/audited/keys/{key_id}", json={"name": "ci-2"}).status_code == 200
        rotated = http.post(f"/tenants/audited/keys/{key_id}/rotate", json={"grace_s": 60}).json()
        assert http.post(f"/tenants/audited/keys/{key_id}/revoke").status_code == 200
        assert http.delete(f"/tenants/audited/keys/{rotated['key_id']}").status_code == 200
        assert http.delete("/tenants/audited").status_code == 200
        assert http.get("/tenants").status_code == 200  # reads are not changes
        assert http.patch("/tenants/nobody", json={"rpm": 1}).status_code == 404  # nor are refusals
    records = lines.records()
    assert [r["action"] for r in records] == [
        "tenant.create",
        "tenant.update",
        "key.create",
        "key.update",
        "key.create",  # the replacement
        "key.rotate",
        "key.revoke",
        "key.delete",
        "tenant.delete",
    ]
    by_action = {r["action"]: r for r in records}
    update = by_action["tenant.update"]
    assert update["tenant"] == "audited" and update["before"]["rpm"] == 10 and update["after"]["rpm"] == 20
    digest = hashlib.sha256(plaintext.encode()).hexdigest()
    key_update = by_action["key.update"]
    assert key_update["key_id"] == key_id and key_update["before"]["digest"] == digest
    assert (key_update["before"]["name"], key_update["after"]["name"]) == ("ci", "ci-2")
    rotate = by_action["key.rotate"]
    assert rotate["after"]["replaced_by"] == rotated["key_id"] and rotate["after"]["expires_at"] > 0
    assert by_action["key.revoke"]["after"]["revoked"] is True and by_action["key.delete"]["after"] is None
    assert by_action["tenant.delete"]["before"]["id"] == "audited" and by_action["tenant.delete"]["after"] is None
    for record in records:
        host, _, port = record["actor"].rpartition(":")
        assert host == "127.0.0.1" and port.isdigit()
        assert record["time"].endswith("Z")
    for line in lines.lines:
        assert plaintext not in line and rotated["key"] not in line and ADMIN_TOKEN not in line


def test_replica_changes_are_audited(gw, fake):
    replicas = gw.url + "/admin/v1/models/tiny/replicas"
    headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    with captured(AUDIT_LOGGER) as lines:
        added = httpx.post(replicas, headers=headers, json={"name": "r9", "url": fake.url, "kv_events": False})
        assert added.status_code == 201
        assert httpx.post(replicas + "/r9/drain", headers=headers).status_code == 200
        assert httpx.delete(replicas + "/r9", headers=headers).status_code == 200
        assert httpx.post(replicas + "/nope/drain", headers=headers).status_code == 404
    records = lines.records()
    assert [(r["action"], r["model"], r["replica"]) for r in records] == [
        ("replica.add", "tiny", "r9"),
        ("replica.drain", "tiny", "r9"),
        ("replica.remove", "tiny", "r9"),
    ]
    assert records[0]["after"]["url"].rstrip("/") == fake.url


def test_a_refused_admin_token_changes_nothing_and_logs_nothing(gw):
    with captured(AUDIT_LOGGER) as lines:
        response = httpx.post(gw.url + "/admin/v1/tenants", json={"id": "x"}, headers={"authorization": "Bearer no"})
        assert response.status_code == 401
    assert lines.lines == []
