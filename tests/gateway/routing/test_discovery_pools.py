"""Several discovery entries for one model (a disaggregated model's prefill and decode pools, each found on its own):
a DNS server on loopback answers two headless Services' A records, each entry's loop fills its own pool with its
role, and a change in one pool leaves the other alone; the config's list form and what it refuses."""

from __future__ import annotations

import pytest
from openai import OpenAI

from gateway.config import ConfigError, config_from_dict
from gateway.routing.base import Role
from gateway.routing.discovery.config import name_prefixes
from gateway.routing.discovery.manager import build_discovery
from gateway.routing.factory import build_router
from tests.gateway.conftest import Admin, gateway_config, serve_gateway
from tests.gateway.disagg_upstream import PrefillUpstream
from tests.gateway.fake_upstream import TOKEN, FakeUpstream
from tests.gateway.routing.discovery_servers import DnsServer, replicas_on_one_port

PREFIX_ROUTER = "gateway.routing.factory:build_router"
PREFILL = "sg-sluicegate-engine-prefill-headless.llm.svc.cluster.local."
DECODE = "sg-sluicegate-engine-decode-headless.llm.svc.cluster.local."
CHAT = [{"role": "user", "content": "a prompt long enough to fill a block or two of the tiny model's cache " * 3}]


@pytest.fixture
def dns_server():
    with DnsServer() as server:
        yield server


def pools(server: DnsServer, port: int = 8100, **fields) -> list[dict]:
    """The two entries, as the chart renders them; interval_s long: the tests tick the loops themselves."""
    common = {"port": port, "interval_s": 60, "kv_events": False, "nameservers": [server.address], "timeout_s": 0.5}
    return [{"dns": PREFILL, "role": "prefill", **common, **fields}, {"dns": DECODE, "role": "decode", **common}]


def model(discovery, **fields) -> dict:
    return {"router": PREFIX_ROUTER, "models": {"tiny": {"discovery": discovery, **fields}}}


async def test_each_entry_fills_its_own_pool_and_a_change_in_one_leaves_the_other(dns_server):
    dns_server.records[(PREFILL, "A")] = ["127.0.0.2", "127.0.0.3"]
    dns_server.records[(DECODE, "A")] = ["127.0.0.4"]
    config = config_from_dict(model(pools(dns_server)))
    router = build_router(config.routing_models)
    discovery = build_discovery(config.discovery_models, router)
    assert [(loop.role, loop.prefix) for loop in discovery.loops] == [
        (Role.PREFILL, "prefill"),
        (Role.DECODE, "decode"),
    ]

    def found() -> dict[str, tuple[Role, str]]:
        return {r.name: (r.role, r.state) for r in router.replicas("tiny")}

    await discovery.start()
    try:
        assert found() == {
            "prefill-127.0.0.2-8100": (Role.PREFILL, "active"),
            "prefill-127.0.0.3-8100": (Role.PREFILL, "active"),
            "decode-127.0.0.4-8100": (Role.DECODE, "active"),
        }
        assert router.disaggregated("tiny")

        dns_server.records[(PREFILL, "A")] = ["127.0.0.3"]  # a prefill Pod went away
        dns_server.records[(DECODE, "A")] = ["127.0.0.4", "127.0.0.5"]  # a decode Pod joined
        for loop in discovery.loops:
            await loop.tick()
        assert found() == {
            "prefill-127.0.0.3-8100": (Role.PREFILL, "active"),
            "decode-127.0.0.4-8100": (Role.DECODE, "active"),
            "decode-127.0.0.5-8100": (Role.DECODE, "active"),
        }

        del dns_server.records[(DECODE, "A")]  # the decode Service is gone: its pool empties, the prefill pool stays
        for loop in discovery.loops:
            await loop.tick()
        assert found() == {"prefill-127.0.0.3-8100": (Role.PREFILL, "active")}
        assert [loop.last_error for loop in discovery.loops] == [None, None]
    finally:
        await discovery.close()


async def test_one_address_in_both_services_is_two_replicas_not_one_taken_over(dns_server):
    """Names never collide across entries: each entry's replicas carry its prefix."""
    dns_server.records[(PREFILL, "A")] = ["127.0.0.2"]
    dns_server.records[(DECODE, "A")] = ["127.0.0.2"]
    config = config_from_dict(model(pools(dns_server)))
    router = build_router(config.routing_models)
    discovery = build_discovery(config.discovery_models, router)
    await discovery.start()
    try:
        assert {r.name: r.role for r in router.replicas("tiny")} == {
            "prefill-127.0.0.2-8100": Role.PREFILL,
            "decode-127.0.0.2-8100": Role.DECODE,
        }
    finally:
        await discovery.close()


def test_a_gateway_serves_both_hops_through_the_discovered_pools(dns_server, tokenizer_dir):
    prefill, decode = PrefillUpstream(), FakeUpstream()
    with replicas_on_one_port([prefill.app, decode.app]) as (port, _):
        dns_server.records[(PREFILL, "A")] = ["127.0.0.2"]
        dns_server.records[(DECODE, "A")] = ["127.0.0.3"]
        config = gateway_config([], tokenizer_dir, router=PREFIX_ROUTER, debug_headers=True)
        config["models"]["tiny"]["discovery"] = pools(dns_server, port)
        config["models"]["tiny"]["prefill_min_prompt_tokens"] = 0
        with serve_gateway(config) as gw:
            admin = Admin(gw.url)
            client = OpenAI(base_url=gw.url + "/v1", api_key=admin.key(admin.tenant()), max_retries=0)
            raw = client.chat.completions.with_raw_response.create(model="tiny", messages=CHAT, max_tokens=2)
            assert raw.parse().choices[0].message.content == TOKEN * 2
            assert raw.headers["x-sluicegate-prefill-replica"] == f"prefill-127.0.0.2-{port}"
            assert raw.headers["x-sluicegate-replica"] == f"decode-127.0.0.3-{port}"
            [decode_body] = decode.received
            assert decode_body["kv_transfer_params"] == prefill.handed[0]


def test_the_list_form_loads_and_one_entry_stays_as_it_was():
    config = config_from_dict(model([{"dns": "p.svc", "port": 8100, "role": "prefill"}, {"srv": "_http._tcp.d.svc"}]))
    [prefill, whole] = config.discovery_models["tiny"]
    assert (prefill.role, whole.role) == (Role.PREFILL, Role.BOTH)
    assert name_prefixes([prefill, whole]) == ["prefill", "both"]

    one = config_from_dict(model({"dns": "e.svc", "port": 8100}))
    assert one.models["tiny"].discovery is not None and one.models["tiny"].discovery_entries == [
        one.models["tiny"].discovery
    ]
    assert name_prefixes(one.discovery_models["tiny"]) == [""]  # replicas keep their names: e.g. 10.0.0.5-8100
    decode_0, decode_1 = {"dns": "a.svc", "port": 1, "role": "decode"}, {"dns": "b.svc", "port": 1, "role": "decode"}
    two_decode = config_from_dict(model([decode_0, {**decode_1, "prefix": "decode2"}]))
    assert name_prefixes(two_decode.discovery_models["tiny"]) == ["decode", "decode2"]


PREFILL_ENTRY = {"dns": "p.svc", "port": 8100, "role": "prefill"}
DECODE_ENTRY = {"dns": "d.svc", "port": 8100, "role": "decode"}


@pytest.mark.parametrize(
    "discovery, message",
    [
        (
            [PREFILL_ENTRY, {**PREFILL_ENTRY, "dns": "p2.svc", "prefix": "p2"}],
            "models.tiny.discovery[0].role: prefill replicas hand their KV to decode replicas; give at least one "
            "replica of role decode",
        ),
        ([DECODE_ENTRY, {**DECODE_ENTRY, "dns": "d2.svc"}], "models.tiny.discovery[1].prefix: entries 0 and 1"),
        ([PREFILL_ENTRY, {**DECODE_ENTRY, "prefix": "prefill"}], "models.tiny.discovery[1].prefix: entries 0 and 1"),
        ([PREFILL_ENTRY, {**DECODE_ENTRY, "role": "decoder"}], "models.tiny.discovery[1].role='decoder'"),
        ([PREFILL_ENTRY, {"dns": "d.svc", "role": "decode"}], "models.tiny.discovery[1]={'dns': 'd.svc'"),
        ([PREFILL_ENTRY, {**DECODE_ENTRY, "interval_s": 0}], "models.tiny.discovery[1].interval_s=0"),
        ([{**PREFILL_ENTRY, "prefix": "pre-fill"}, DECODE_ENTRY], "models.tiny.discovery[0].prefix='pre-fill'"),
        ([], "models.tiny.discovery=[]: List should have at least 1 item"),
    ],
)
def test_a_list_that_cannot_work_is_refused_naming_the_field(discovery, message):
    with pytest.raises(ConfigError) as error:
        config_from_dict(model(discovery))
    assert message in str(error.value)
