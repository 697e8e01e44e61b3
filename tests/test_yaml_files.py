"""Operators' YAML files refuse a key written twice (sluicegate/yaml_files.py), in all three places one is read:
the gateway config, the tenant seed and the engine's --config. PyYAML alone keeps the last one silently."""

import pytest
import yaml

from engine.server import cli
from gateway.admin.seed import load_seed
from gateway.config import ConfigError, load_config
from sluicegate.yaml_files import load_yaml


def test_duplicate_key_names_both_lines():
    with pytest.raises(yaml.YAMLError, match=r"duplicate key 'redis_url' \(first on line 1\)") as caught:
        load_yaml("redis_url: redis://a:6379\nlisten: {port: 8080}\nredis_url: redis://b:6379\n")
    assert "line 3" in str(caught.value)


def test_nested_and_flow_duplicates():
    with pytest.raises(yaml.YAMLError, match="duplicate key 'rpm'"):
        load_yaml("tenants:\n  - name: acme\n    limits:\n      rpm: 10\n      rpm: 20\n")
    with pytest.raises(yaml.YAMLError, match="duplicate key 'a'"):
        load_yaml("{a: 1, a: 2}")


def test_merge_keys_may_still_be_overridden():
    loaded = load_yaml("base: &b {rpm: 10, tpm: 100}\nacme:\n  <<: *b\n  rpm: 50\n")
    assert loaded["acme"] == {"rpm": 50, "tpm": 100}


def test_what_safe_load_reads_is_unchanged():
    text = "a: 1\nb: [x, {c: 2}]\nd: null\ne: 2026-12-06\n"
    assert load_yaml(text) == yaml.safe_load(text)
    with pytest.raises(yaml.YAMLError):  # still safe: no Python objects
        load_yaml("!!python/object/apply:os.system ['true']")


def test_gateway_config_refuses_a_duplicate(tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text("models: {}\nmodels: {}\n")
    with pytest.raises(ConfigError, match="duplicate key 'models'"):
        load_config(path)


def test_tenant_seed_refuses_a_duplicate(tmp_path):
    path = tmp_path / "tenants.yaml"
    path.write_text("tenants:\n  - name: acme\n    name: other\n")
    with pytest.raises(ConfigError, match="duplicate key 'name'"):
        load_seed(str(path))


def test_engine_config_refuses_a_duplicate(tmp_path, capsys):
    path = tmp_path / "engine.yaml"
    path.write_text("engine:\n  max_num_seqs: 4\n  max_num_seqs: 8\n")
    assert cli.main(["--config", str(path), "--model", "/m"]) == 2
    assert "duplicate key 'max_num_seqs'" in capsys.readouterr().err
