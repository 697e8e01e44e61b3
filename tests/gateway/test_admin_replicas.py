"""The admin API's replica pools, the debug headers and failover, for real: a gateway with the prefix-affinity router
in front of fake upstreams (no KV feed: the router's own history), changed at run time through the API and the CLI."""

from __future__ import annotations

import json

import httpx
import pytest

from gateway.admin import cli as admin_cli
from gateway.app import build_app
from gateway.config import config_from_dict
from tests.gateway.conftest import ADMIN_TOKEN, Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.dying_upstream import DyingUpstream
from tests.gateway.fake_upstream import FakeUpstream
from tests.gateway.servers import ThreadServer

CHAT = [{"role": "user", "content": "hello there, route me"}]


@pytest.fixture
def two_upstreams():
    a, b = FakeUpstream(), FakeUpstream()
    with ThreadServer(a.app) as up_a, ThreadServer(b.app) as up_b:
        yield (a, up_a.url), (b, up_b.url)


def routed_config(urls: list[tuple[str, str]], tokenizer_dir: str, **extra) -> dict:
    config = gateway_config([], tokenizer_dir, router="gateway.routing.factory:build_router", **extra)
    config["models"]["tiny"]["replicas"] = [{"name": name, "url": url, "kv_events": False} for name, url in urls]
    config["models"]["tiny"]["health"] = {"interval_s": 0.2}
    return config


def chat(gw, key: str, content: str = "hello there, route me") -> httpx.Response:
    return httpx.post(
        gw.url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        timeout=20,
        json={"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": content}]},
    )


def test_replicas_are_added_drained_and_removed_at_run_time(two_upstreams, tokenizer_dir):
    (fake_a, url_a), (fake_b, url_b) = two_upstreams
    with serve_gateway(routed_config([("a", url_a)], tokenizer_dir, debug_headers=True)) as gw:
        admin = Admin(gw.url)
        key = admin.key(admin.tenant())
        listed = admin.http.get("/models/tiny/replicas").json()["data"]
        assert [(r["name"], r["url"], r["state"]) for r in listed] == [("a", url_a, "active")]
        answer = chat(gw, key)
        assert answer.headers["x-sluicegate-replica"] == "a"
        assert int(answer.headers["x-sluicegate-prefix-tokens"]) == 0  # a new prefix
        again = chat(gw, key)  # the router remembers where it sent that prefix
        assert again.headers["x-sluicegate-replica"] == "a" and int(again.headers["x-sluicegate-prefix-tokens"]) > 0

        added = admin.http.post("/models/tiny/replicas", json={"name": "b", "url": url_b, "kv_events": False})
        assert added.status_code == 201 and added.json()["state"] == "active"
        assert admin.http.post("/models/tiny/replicas", json={"name": "b", "url": url_a}).status_code == 409
        drained = admin.http.post("/models/tiny/replicas/a/drain")
        assert drained.status_code == 200 and drained.json()["state"] == "draining"
        wait_until(
            lambda: any(
                r["name"] == "b" and r["healthy"] for r in admin.http.get("/models/tiny/replicas").json()["data"]
            )
        )
        served = [chat(gw, key, f"prompt {i}") for i in range(4)]
        assert {r.headers["x-sluicegate-replica"] for r in served} == {"b"}  # a takes nothing new
        assert len(fake_b.received) == 4

        removed = admin.http.delete("/models/tiny/replicas/a")
        assert removed.status_code == 200
        assert [r["name"] for r in admin.http.get("/models/tiny/replicas").json()["data"]] == ["b"]
        assert admin.http.delete("/models/tiny/replicas/a").json()["error"]["code"] == "replica_not_found"
        assert admin.http.get("/models/nope/replicas").json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize(
    "body, param",
    [
        ({"name": "b c", "url": "http://x:1"}, "name"),
        ({"name": "b", "url": "ftp://x"}, "url"),
        ({"name": "b", "url": "http://x:1", "kv_events": "yes"}, "kv_events"),
        ({"name": "b", "url": "http://x:1", "weight": 2}, "weight"),
    ],
)
def test_a_bad_replica_is_a_400_naming_the_field(two_upstreams, tokenizer_dir, body, param):
    (_, url_a), _ = two_upstreams
    with serve_gateway(routed_config([("a", url_a)], tokenizer_dir)) as gw:
        response = Admin(gw.url).http.post("/models/tiny/replicas", json=body)
        assert response.status_code == 400 and response.json()["error"]["param"] == param


def test_replica_changes_are_refused_with_several_workers(two_upstreams, tokenizer_dir):
    (_, url_a), (_, url_b) = two_upstreams
    app = build_app(config_from_dict(routed_config([("a", url_a)], tokenizer_dir)).model_copy(update={"workers": 2}))
    with ThreadServer(app) as gw:
        http = Admin(gw.url).http
        refused = http.post("/models/tiny/replicas", json={"name": "b", "url": url_b})
        assert refused.status_code == 409 and "--workers" in refused.json()["error"]["message"]
        assert http.get("/models/tiny/replicas").status_code == 200  # reading is fine


def test_without_debug_headers_routing_stays_private(two_upstreams, tokenizer_dir):
    (_, url_a), _ = two_upstreams
    with serve_gateway(routed_config([("a", url_a)], tokenizer_dir)) as gw:
        admin = Admin(gw.url)
        answer = chat(gw, admin.key(admin.tenant()))
        assert answer.status_code == 200 and "x-sluicegate-replica" not in answer.headers


def test_cli_manages_replicas(two_upstreams, tokenizer_dir, capsys):
    (_, url_a), (_, url_b) = two_upstreams
    with serve_gateway(routed_config([("a", url_a)], tokenizer_dir)) as gw:
        base = ["--url", gw.url, "--token", ADMIN_TOKEN, "replicas"]
        assert admin_cli.main(base + ["add", "tiny", "b", url_b, "--no-kv-events"]) == 0
        assert json.loads(capsys.readouterr().out)["kv_events"] is False
        assert admin_cli.main(base + ["drain", "tiny", "b"]) == 0
        assert json.loads(capsys.readouterr().out)["state"] == "draining"
        assert admin_cli.main(base + ["list", "tiny"]) == 0
        assert [r["name"] for r in json.loads(capsys.readouterr().out)["data"]] == ["a", "b"]
        assert admin_cli.main(base + ["remove", "tiny", "b"]) == 0
        capsys.readouterr()
        assert admin_cli.main(base + ["remove", "tiny", "b"]) == 1
        assert "404" in capsys.readouterr().err


def test_a_replica_dead_under_a_pooled_connection_fails_over_to_another(two_upstreams, tokenizer_dir):
    """The gateway holds a kept-alive connection to a replica that then died: the request on it fails, a fresh
    connection is refused, and the request still goes to the other replica (the stale connection does not use up
    the one retry)."""
    (fake_b, url_b), _ = two_upstreams
    with DyingUpstream() as dying:
        config = routed_config([("a", dying.url)], tokenizer_dir, debug_headers=True)
        config["models"]["tiny"]["health"] = {"interval_s": 60}  # the probes must not notice first
        with serve_gateway(config) as gw:
            admin = Admin(gw.url)
            key = admin.key(admin.tenant())
            assert chat(gw, key).headers["x-sluicegate-replica"] == "a"  # leaves a kept-alive connection to a
            assert (
                admin.http.post(
                    "/models/tiny/replicas", json={"name": "b", "url": url_b, "kv_events": False}
                ).status_code
                == 201
            )
            again = chat(gw, key)  # the same prefix: routed to a, where the router sent it before
            assert again.status_code == 200, again.text
            assert again.headers["x-sluicegate-replica"] == "b" and len(fake_b.received) == 1
