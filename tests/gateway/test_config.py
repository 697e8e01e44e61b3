"""Config validation: errors name the field, the value and the fix; the shipped config files load."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway import cli
from gateway.admin.seed import seed_tenants
from gateway.admin.tenants import digest_key, make_tenant_check, policy_name_check
from gateway.config import ConfigError, config_from_dict, load_config
from gateway.request.hooks import NoHooks
from gateway.store.memory import MemoryStore

GOOD = {"models": {"tiny": {"replicas": ["http://127.0.0.1:8100"]}}}


@pytest.mark.parametrize(
    "raw, fragment",
    [
        ({}, "models"),
        ({"models": {"tiny": {"replicas": []}}}, "models.tiny.replicas"),
        ({"models": {"tiny": {"replicas": ["ftp://x"]}}}, "models.tiny.replicas[0]"),
        ({"models": {"tiny": {"replicas": ["http://a"], "tokenizr": "x"}}}, "unknown keys ['tokenizr']"),
        ({"models": {"tiny": {"replicas": ["http://a"], "tokenizer": "/no/such/dir"}}}, "models.tiny.tokenizer"),
        ({**GOOD, "redis": {"failure_mode": "fail_sideways"}}, "redis.failure_mode"),
        ({**GOOD, "redis": {"socket_timeout_s": 0}}, "redis.socket_timeout_s"),
        ({**GOOD, "num_instances": -2}, "num_instances"),
        ({"models": {"tiny": {"replicas": ["http://a"], "block_size": 16.5}}}, "models.tiny.block_size=16.5"),
        ({"models": {"tiny": {"replicas": ["http://a"], "block_size": "16"}}}, "models.tiny.block_size='16'"),
        ({**GOOD, "port": "8000"}, "port='8000'"),
        ({**GOOD, "redis": {"url_env": "REDIS_URL", "timeout_s": 1}}, "redis: unknown keys ['timeout_s']"),
        # a folder without tokenizer.json was a traceback at start-up, exit 3
        ({"models": {"tiny": {"replicas": ["http://a"], "tokenizer": "/"}}}, "has no tokenizer.json"),
        ({**GOOD, "drain_timeout_s": 0}, "drain_timeout_s"),
        # a mistyped address reached uvicorn's resolver and failed as the server started, exit 3
        ({**GOOD, "host": "999.1.1.1"}, "host='999.1.1.1': neither an IP address"),
        ({**GOOD, "host": "127.0.0.1:8000"}, "host='127.0.0.1:8000'"),
    ],
)
def test_bad_config_names_the_field(raw, fragment):
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    assert fragment in str(info.value)


def test_replica_forms_and_router_view():
    config = config_from_dict(
        {
            "models": {
                "tiny": {
                    "replicas": ["http://a:1/", {"name": "b", "url": "http://b:2", "kv_events": False}],
                    "routing": {"policy": "round_robin"},
                }
            }
        }
    )
    assert [(r.name, r.url) for r in config.models["tiny"].replicas] == [("tiny-0", "http://a:1"), ("b", "http://b:2")]
    assert config.routing_models["tiny"] == {
        "replicas": [{"name": "tiny-0", "url": "http://a:1"}, {"name": "b", "url": "http://b:2", "kv_events": False}],
        "routing": {"policy": "round_robin"},
    }


def test_shipped_config_loads(tmp_path, monkeypatch, tokenizer_dir):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny").symlink_to(tokenizer_dir)
    (tmp_path / "config").mkdir()
    for name in ("gateway.yaml", "tenants.yaml"):
        (tmp_path / "config" / name).write_text(Path(f"config/{name}").read_text())
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REDIS_URL", raising=False)
    config = load_config("config/gateway.yaml")
    assert config.redis.url is None and config.tenants_seed == "config/tenants.yaml"
    assert [replica.name for replica in config.models["tiny"].replicas] == ["engine-0", "engine-1"]
    store = MemoryStore()
    check = make_tenant_check(policy_name_check(NoHooks()), config.models, priced=[])
    assert asyncio.run(seed_tenants(store, config.tenants_seed, check)) == 2  # the demo tenant and its key
    assert asyncio.run(seed_tenants(store, config.tenants_seed, check)) == 0  # seeding again creates nothing
    demo = asyncio.run(store.get_tenant("demo"))
    assert demo.rpm == 600 and asyncio.run(store.get_key(digest_key("sk-sg-demo-local-dev"))).tenant_id == "demo"


class OnePolicy:
    """Hooks that define the policy `strict` only (GuardrailHooks.check_policy_name's contract)."""

    def check_policy_name(self, name: str) -> None:
        if name not in ("off", "strict"):
            raise ValueError(f"guardrail policy {name!r} is not defined; defined: ['strict']")


def _seed_check(hooks, priced=()):
    return make_tenant_check(policy_name_check(hooks), served=["tiny", "small"], priced=priced)


@pytest.mark.parametrize("hooks, policy", [(OnePolicy(), "strct"), (NoHooks(), "strict")])
def test_seed_refuses_an_undefined_guardrail_policy(tmp_path, hooks, policy):
    seed = tmp_path / "tenants.yaml"
    seed.write_text(f"tenants:\n  - id: acme\n    guardrails: {policy}\n")
    store = MemoryStore()
    with pytest.raises(ConfigError, match=f"'{policy}' is not defined"):
        asyncio.run(seed_tenants(store, str(seed), _seed_check(hooks)))
    assert asyncio.run(store.get_tenant("acme")) is None
    seed.write_text("tenants:\n  - id: acme\n    guardrails: strict\n")
    assert asyncio.run(seed_tenants(store, str(seed), _seed_check(OnePolicy()))) == 1


@pytest.mark.parametrize(
    "tenant, priced, fragment",
    [
        ("{id: acme, models: [tinny]}", ["tiny"], "not served"),
        ("{id: acme, daily_budget_usd: 5}", [], "daily_budget_usd counts US dollars"),
        ("{id: acme, models: [small], monthly_budget_usd: 5}", ["tiny"], "monthly_budget_usd counts US dollars"),
    ],
)
def test_seed_refuses_what_the_admin_api_refuses(tmp_path, tenant, priced, fragment):
    """The seed's tenants pass the admin API's checks: a model not served, a USD budget nothing prices."""
    seed = tmp_path / "tenants.yaml"
    seed.write_text(f"tenants:\n  - {tenant}\n")
    store = MemoryStore()
    with pytest.raises(ConfigError, match=fragment):
        asyncio.run(seed_tenants(store, str(seed), _seed_check(NoHooks(), priced)))
    assert asyncio.run(store.get_tenant("acme")) is None
    seed.write_text("tenants:\n  - {id: acme, models: [tiny], daily_budget_usd: 5}\n")
    assert asyncio.run(seed_tenants(store, str(seed), _seed_check(NoHooks(), ["tiny"]))) == 1


def test_cli_refuses_a_bad_config(tmp_path, capsys):
    bad = tmp_path / "gateway.yaml"
    bad.write_text("models: {tiny: {replicas: []}}\n")
    assert cli.main(["--config", str(bad)]) == 2
    assert "models.tiny.replicas" in capsys.readouterr().err
    assert cli.main(["--config", str(tmp_path / "missing.yaml")]) == 2
    # settings only the prefix router has, under the default round-robin one: refused, not silently ignored
    bad.write_text("models: {tiny: {replicas: ['http://127.0.0.1:9'], health: {intervall_s: 5}}}\n")
    capsys.readouterr()
    assert cli.main(["--config", str(bad)]) == 2
    assert "models.tiny.health" in capsys.readouterr().err
    # a guardrail policy's error names where the policy sits in the file, not only its field
    bad.write_text(
        "models: {tiny: {replicas: ['http://127.0.0.1:9']}}\nguardrails: {policies: {strict: {pii_action: nuke}}}\n"
    )
    assert cli.main(["--config", str(bad)]) == 2
    assert "guardrails.policies.strict.pii_action='nuke'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "tenant, fragment",
    [
        ("{id: acme, keys: [{name: k, key_sha256: not-hex}]}", "tenants[0].keys[0].key_sha256='not-hex'"),
        ("{id: acme, keys: [{name: k, key: sk-sg-1, expires_at: .nan}]}", "tenants[0].keys[0].expires_at=nan"),
        ("{id: acme, keys: [{name: k}]}", "`key` or `key_sha256`"),
        ("{id: acme, rpm: '10'}", "tenants[0].rpm='10'"),
        ("{id: '..'}", "tenants[0].id='..'"),
    ],
)
def test_cli_refuses_a_bad_tenants_seed_before_serving(tmp_path, capsys, tenant, fragment):
    seed = tmp_path / "tenants.yaml"
    seed.write_text(f"tenants:\n  - {tenant}\n")
    config = tmp_path / "gateway.yaml"
    config.write_text(f"tenants_seed: {seed}\nmodels: {{tiny: {{replicas: ['http://127.0.0.1:1']}}}}\n")
    assert cli.main(["--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"tenants seed '{seed}'" in err and fragment in err, err
