"""Replica roles in the config, the admin API, its CLI and discovery: what a disaggregated model may be made of, and
errors that name the field."""

from __future__ import annotations

import json

import pytest

from gateway.admin import cli as admin_cli
from gateway.app import build_app
from gateway.config import ConfigError, config_from_dict
from gateway.routing.base import Role
from gateway.routing.discovery.loop import DiscoveryLoop
from gateway.routing.discovery.source import Endpoint
from gateway.routing.factory import build_router
from tests.gateway.conftest import ADMIN_TOKEN, Admin, gateway_config, serve_gateway
from tests.gateway.test_admin_replicas import routed_config

PREFIX_ROUTER = "gateway.routing.factory:build_router"


def model(replicas: list[dict], **fields) -> dict:
    return {"router": PREFIX_ROUTER, "models": {"tiny": {"replicas": replicas, **fields}}}


def test_roles_default_to_both_and_reach_the_router():
    config = config_from_dict(
        model(
            [
                {"name": "p", "url": "http://p:1", "role": "prefill"},
                {"name": "d", "url": "http://d:1", "role": "decode"},
                "http://b:1",
            ]
        )
    )
    router = build_router(config.routing_models)
    assert [(r.name, r.role) for r in router.replicas("tiny")] == [
        ("p", Role.PREFILL),
        ("d", Role.DECODE),
        ("tiny-2", Role.BOTH),
    ]
    assert router.disaggregated("tiny")
    assert not build_router(config_from_dict(model(["http://b:1"])).routing_models).disaggregated("tiny")


@pytest.mark.parametrize(
    "replicas, discovery, message",
    [
        ([{"name": "p", "url": "http://p:1", "role": "prefill"}], None, "models.tiny.replicas: prefill replicas"),
        (
            [{"name": "p", "url": "http://p:1", "role": "prefill"}],
            {"dns": "prefill.svc", "port": 8100, "role": "prefill"},
            "give at least one replica of role decode",
        ),
        ([{"name": "p", "url": "http://p:1", "role": "decoder"}], None, "models.tiny.replicas[0].role='decoder'"),
        ([], {"dns": "engines.svc", "port": 8100, "role": "primary"}, "models.tiny.discovery.role='primary'"),
    ],
)
def test_a_model_that_cannot_work_is_refused_naming_the_field(replicas, discovery, message):
    fields = {"discovery": discovery} if discovery else {}
    with pytest.raises(ConfigError) as error:
        config_from_dict(model(replicas, **fields))
    assert message in str(error.value)


def test_a_discovered_decode_pool_completes_a_listed_prefill_pool():
    discovery = {"dns": "decode.svc", "port": 8100, "role": "decode"}
    config = config_from_dict(model([{"name": "p", "url": "http://p:1", "role": "prefill"}], discovery=discovery))
    assert config.models["tiny"].discovery is not None and config.models["tiny"].discovery.role == Role.DECODE


def test_the_round_robin_router_refuses_prefill_replicas(tokenizer_dir):
    config = gateway_config([], tokenizer_dir)
    config["models"]["tiny"]["replicas"] = [
        {"name": "p", "url": "http://p:1", "role": "prefill"},
        {"name": "d", "url": "http://d:1", "role": "decode"},
    ]
    with pytest.raises(ValueError, match=r"models\.tiny\.replicas\[0\]\.role=prefill.*gateway\.routing\.factory"):
        build_app(config_from_dict(config))
    config["models"]["tiny"]["replicas"].pop(0)  # decode replicas alone serve whole requests: nothing to refuse
    assert build_app(config_from_dict(config)).state.gateway.router.disaggregated("tiny") is False


def test_the_admin_api_adds_and_lists_roles(fake, tokenizer_dir):
    config = routed_config([("a", fake.url)], tokenizer_dir)
    with serve_gateway(config) as gw:
        admin = Admin(gw.url)
        added = admin.http.post("/models/tiny/replicas", json={"name": "d", "url": fake.url, "role": "decode"})
        assert added.status_code == 201 and added.json()["role"] == "decode"
        listed = admin.http.get("/models/tiny/replicas").json()["data"]
        assert [(r["name"], r["role"]) for r in listed] == [("a", "both"), ("d", "decode")]
        refused = admin.http.post("/models/tiny/replicas", json={"name": "p", "url": fake.url, "role": "prefil"})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "role"
        assert "prefill, decode, both" in refused.json()["error"]["message"]
        # a draining replica comes back only as what it was
        assert admin.http.post("/models/tiny/replicas/d/drain").status_code == 200
        other = admin.http.post("/models/tiny/replicas", json={"name": "d", "url": fake.url, "role": "prefill"})
        assert other.status_code == 409 and "role decode" in other.json()["error"]["message"]
        again = admin.http.post("/models/tiny/replicas", json={"name": "d", "url": fake.url, "role": "decode"})
        assert again.status_code == 201 and again.json()["state"] == "active"


def test_the_cli_adds_a_replica_with_its_role(fake, tokenizer_dir, capsys):
    with serve_gateway(routed_config([("a", fake.url)], tokenizer_dir)) as gw:
        base = ["--url", gw.url, "--token", ADMIN_TOKEN, "replicas"]
        assert admin_cli.main(base + ["add", "tiny", "p", fake.url, "--role", "prefill"]) == 0
        assert json.loads(capsys.readouterr().out)["role"] == "prefill"
        assert admin_cli.main(base + ["add", "tiny", "b", fake.url]) == 0
        assert json.loads(capsys.readouterr().out)["role"] == "both"


class _Found:
    def __init__(self, endpoints: frozenset[Endpoint]) -> None:
        self.endpoints = endpoints

    async def resolve(self) -> frozenset[Endpoint]:
        return self.endpoints

    async def close(self) -> None:
        pass


async def test_discovered_replicas_take_the_sections_role():
    router = build_router({"tiny": {"replicas": [{"name": "p", "url": "http://p:1", "role": "prefill"}]}})
    found = frozenset({Endpoint("d-0", "http://10.0.0.7:8100")})
    loop = DiscoveryLoop("tiny", _Found(found), router, 60, kv_events=False, role=Role.DECODE)
    await loop.tick()
    assert {r.name: r.role for r in router.replicas("tiny")} == {"p": Role.PREFILL, "d-0": Role.DECODE}
