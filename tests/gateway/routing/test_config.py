"""Config parsing: the documented YAML shape, defaults, and errors that name the value."""

from __future__ import annotations

import pytest
import yaml

from gateway.routing import RoutingConfigError, build_router
from gateway.routing.config import parse_models_config
from gateway.routing.factory import __doc__ as FACTORY_DOC


def test_the_documented_example_parses():
    example = FACTORY_DOC.split("\n\n")[1]
    configs = parse_models_config(yaml.safe_load(example)["models"])
    config = configs["tiny-llama"]
    assert [(r.name, r.kv_events) for r in config.replicas] == [("r0", True), ("ext", False)]
    assert config.policy.name == "expected_ttft" and config.health.breaker_failures == 3


def test_routing_kv_events_is_the_default_for_replicas():
    routing = {"policy": "least_loaded", "kv_events": False}
    config = parse_models_config({"m": {"replicas": [{"name": "a", "url": "http://h:1/"}], "routing": routing}})["m"]
    assert config.replicas[0].kv_events is False and config.replicas[0].url == "http://h:1"
    assert config.policy.name == "least_loaded"


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"m": {"replicas": [{"name": "a", "url": "h:1"}]}}, "url='h:1'"),
        ({"m": {"replicas": [{"name": "a", "url": "http://h"}, {"name": "a", "url": "http://i"}]}}, "more than once"),
        ({"m": {"replicas": [], "routing": {"policy": "random"}}}, "policy='random'"),
        ({"m": {"replicas": [], "routing": {"max_load_ratio": 0.5}}}, "max_load_ratio=0.5"),
        ({"m": {"replicas": [], "health": {"interval_s": 0}}}, "interval_s=0"),
        ({"m": {"replicas": [], "health": {"intervall_s": 1}}}, "unknown keys ['intervall_s']"),
        ({"m": {"replica": []}}, "unknown keys ['replica']"),
        ({"m": {"replicas": "a"}}, "models.m.replicas='a': Input should be a valid list"),
        ({"m": {"replicas": [], "index": {"block_size": 16.5}}}, "models.m.index.block_size=16.5"),
        ({"m": {"replicas": [], "routing": {"virtual_nodes": "64"}}}, "models.m.routing.virtual_nodes='64'"),
        (["m"], "expected a mapping"),
    ],
)
def test_bad_config_names_the_value(raw, message):
    with pytest.raises(RoutingConfigError) as error:
        build_router(raw)
    assert message in str(error.value)
