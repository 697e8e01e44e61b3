"""DNS discovery for real: a DNS server on loopback answers A and SRV records, fake replicas on loopback serve, and a
gateway (or a PrefixRouter) follows the records as replicas join and leave while requests flow."""

from __future__ import annotations

import logging
import threading

import dns.rcode
import httpx
import pytest
from openai import OpenAI

from gateway.config import ConfigError, config_from_dict
from gateway.routing.config import parse_models_config
from gateway.routing.discovery import DiscoveryConfig, DiscoveryError
from gateway.routing.discovery.dns import DnsSource
from gateway.routing.discovery.loop import DiscoveryLoop
from gateway.routing.discovery.manager import build_discovery
from gateway.routing.router import PrefixRouter
from gateway.simple_router import build_router as build_simple_router
from tests.gateway.conftest import Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.fake_upstream import FakeUpstream
from tests.gateway.routing.discovery_servers import DnsServer, replicas_on_one_port
from tests.gateway.servers import ThreadServer

NAME = "engine-headless.llm.svc.cluster.local."


@pytest.fixture
def dns_server():
    with DnsServer() as server:
        yield server


def discovery(server: DnsServer, **fields) -> DiscoveryConfig:
    return DiscoveryConfig.model_validate({"nameservers": [server.address], "timeout_s": 0.5, **fields})


def replica_names(admin: Admin) -> dict[str, str]:
    return {r["name"]: r["state"] for r in admin.http.get("/models/tiny/replicas").json()["data"]}


def test_replicas_join_and_leave_a_gateway_while_requests_flow(dns_server, tokenizer_dir):
    """A records of a headless Service: .2 serves, .3 joins, .2 leaves with a stream in flight that still completes,
    and no request of a steady client fails through any of it."""
    fake_2, fake_3 = FakeUpstream(), FakeUpstream()
    with replicas_on_one_port([fake_2.app, fake_3.app]) as (port, _):
        dns_server.records[(NAME, "A")] = ["127.0.0.2"]
        config = gateway_config([], tokenizer_dir, router="gateway.routing.factory:build_router", debug_headers=True)
        config["models"]["tiny"]["discovery"] = {
            "dns": NAME, "port": port, "interval_s": 0.05, "nameservers": [dns_server.address], "kv_events": False,
        }  # fmt: skip
        config["models"]["tiny"]["health"] = {"interval_s": 0.1}
        with serve_gateway(config) as gw:
            admin = Admin(gw.url)
            key = admin.key(admin.tenant())
            client = OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)
            assert replica_names(admin) == {f"127.0.0.2-{port}": "active"}  # found before the first request
            first = client.chat.completions.with_raw_response.create(
                model="tiny", max_tokens=2, messages=[{"role": "user", "content": "hi"}]
            )
            assert first.headers["x-sluicegate-replica"] == f"127.0.0.2-{port}"

            failures: list[str] = []
            served: list[str] = []
            stop = threading.Event()

            def steady_client() -> None:
                while not stop.is_set():
                    try:
                        answer = client.chat.completions.with_raw_response.create(
                            model="tiny", max_tokens=2, messages=[{"role": "user", "content": f"q{len(served)}"}]
                        )
                        served.append(answer.headers["x-sluicegate-replica"])
                    except Exception as exc:  # any failure is a lost request
                        failures.append(repr(exc))

            worker = threading.Thread(target=steady_client)
            worker.start()
            try:
                # A stream on .2 (5 s long: ample for the steps below), in flight when .2 leaves the records.
                stream = client.chat.completions.create(
                    model="tiny", max_tokens=50, stream=True, messages=[{"role": "user", "content": "long"}],
                    extra_body={"fake": {"tokens": 50, "chunk_delay_s": 0.1}},
                )  # fmt: skip
                wait_until(lambda: len(served) >= 5)
                dns_server.records[(NAME, "A")] = ["127.0.0.2", "127.0.0.3"]
                wait_until(lambda: replica_names(admin).get(f"127.0.0.3-{port}") == "active")
                dns_server.records[(NAME, "A")] = ["127.0.0.3"]
                # .2 stops taking requests at once but stays until the stream it serves ends.
                wait_until(lambda: replica_names(admin).get(f"127.0.0.2-{port}") == "removing")
                chunks = [c.choices[0].delta.content for c in stream if c.choices]
                wait_until(lambda: replica_names(admin) == {f"127.0.0.3-{port}": "active"})
                count_after_leave = len(served)
                wait_until(lambda: len(served) >= count_after_leave + 5)
            finally:
                stop.set()
                worker.join(timeout=30)
            assert chunks == ["tok "] * 50  # the in-flight stream was not cut
            assert failures == []
            assert served[-5:] == [f"127.0.0.3-{port}"] * 5
            assert len(fake_3.received) > 0 and f"127.0.0.2-{port}" in served


async def test_srv_records_name_replicas_after_their_hosts(dns_server):
    fakes = [FakeUpstream(), FakeUpstream()]
    with ThreadServer(fakes[0].app) as r0, ThreadServer(fakes[1].app) as r1:
        srv = "_http._tcp." + NAME
        dns_server.records[(srv, "SRV")] = [f"0 50 {r0.port} engine-0.{NAME}", f"0 50 {r1.port} engine-1.{NAME}"]
        dns_server.records[(f"engine-0.{NAME}", "A")] = ["127.0.0.1"]
        dns_server.records[(f"engine-1.{NAME}", "A")] = ["127.0.0.1"]
        source = DnsSource(discovery(dns_server, srv=srv))
        found = {(e.name, e.url) for e in await source.resolve()}
        assert found == {("engine-0", r0.url), ("engine-1", r1.url)}

        router = PrefixRouter(parse_models_config({"tiny": {"replicas": []}}))
        loop = DiscoveryLoop("tiny", source, router, interval_s=0.05, kv_events=False)
        await loop.tick()
        assert sorted((r.name, r.url, r.state) for r in router.replicas("tiny")) == [
            ("engine-0", r0.url, "active"),
            ("engine-1", r1.url, "active"),
        ]
        # engine-1's Pod is gone (its SRV record and its A record); engine-0 is rescheduled on another address.
        dns_server.records[(srv, "SRV")] = [f"0 50 {r0.port} engine-0.{NAME}"]
        del dns_server.records[(f"engine-1.{NAME}", "A")]
        dns_server.records[(f"engine-0.{NAME}", "A")] = ["127.0.0.5"]
        await loop.tick()
        assert [(r.name, r.url) for r in router.replicas("tiny")] == [("engine-0", f"http://127.0.0.5:{r0.port}")]


async def test_a_failing_resolver_keeps_the_last_set_and_nxdomain_empties_it(dns_server, caplog):
    dns_server.records[(NAME, "A")] = ["127.0.0.2", "127.0.0.3"]
    router = PrefixRouter(parse_models_config({"tiny": {"replicas": [{"name": "static", "url": "http://x:1"}]}}))
    loop = DiscoveryLoop("tiny", DnsSource(discovery(dns_server, dns=NAME, port=8100)), router, 1.0, kv_events=False)
    await loop.tick()
    names = {r.name for r in router.replicas("tiny")}
    assert names == {"static", "127.0.0.2-8100", "127.0.0.3-8100"}

    dns_server.rcode = dns.rcode.SERVFAIL
    with caplog.at_level(logging.WARNING, logger="gateway.routing.discovery.loop"):
        await loop.tick()
        await loop.tick()  # the same failure again: logged once
    assert {r.name for r in router.replicas("tiny")} == names
    assert "SERVFAIL" in (loop.last_error or "")
    assert len([r for r in caplog.records if "failed, keeping its 2 replica(s)" in r.getMessage()]) == 1

    dns_server.rcode = dns.rcode.NOERROR
    dns_server.silent = True  # a resolver that does not answer: a timeout, the same verdict
    await loop.tick()
    assert {r.name for r in router.replicas("tiny")} == names and "Timeout" in (loop.last_error or "")

    dns_server.silent = False
    dns_server.records.clear()  # the Service is gone or scaled to zero: NXDOMAIN is an answer
    await loop.tick()
    assert loop.last_error is None
    assert [r.name for r in router.replicas("tiny")] == ["static"]  # only what discovery did not add remains


async def test_a_discovered_name_never_takes_over_a_static_replica(dns_server, caplog):
    dns_server.records[(NAME, "A")] = ["127.0.0.2"]
    router = PrefixRouter(
        parse_models_config({"tiny": {"replicas": [{"name": "127.0.0.2-8100", "url": "http://s:1"}]}})
    )
    loop = DiscoveryLoop("tiny", DnsSource(discovery(dns_server, dns=NAME, port=8100)), router, 1.0)
    with caplog.at_level(logging.WARNING, logger="gateway.routing.discovery.loop"):
        await loop.tick()
        await loop.tick()
    assert [(r.name, r.url) for r in router.replicas("tiny")] == [("127.0.0.2-8100", "http://s:1")]
    assert len([r for r in caplog.records if "it did not add" in r.getMessage()]) == 1
    dns_server.records.clear()
    await loop.tick()  # not ours: left alone
    assert [r.name for r in router.replicas("tiny")] == ["127.0.0.2-8100"]


async def test_the_resolver_error_type_is_a_discovery_error(dns_server):
    dns_server.rcode = dns.rcode.REFUSED
    with pytest.raises(DiscoveryError, match=NAME.rstrip(".")):
        await DnsSource(discovery(dns_server, dns=NAME, port=8100)).resolve()


@pytest.mark.parametrize(
    "section, message",
    [
        ({"dns": "a.b", "kubernetes": {"service": "s"}}, "exactly one of dns, srv or kubernetes"),
        ({"interval_s": 5}, "exactly one of dns, srv or kubernetes"),
        ({"dns": "a.b"}, "dns needs `port`"),
        ({"srv": "_http._tcp.a.b", "port": 80}, "`port` applies to dns only"),
        ({"dns": "a.b", "port": 80, "interval_s": 0}, "models.tiny.discovery.interval_s"),
        ({"dns": "a.b", "port": 80, "ttl": 3}, "unknown keys ['ttl']"),
    ],
)
def test_bad_discovery_sections_are_refused_naming_the_field(section, message):
    with pytest.raises(ConfigError) as raised:
        config_from_dict({"models": {"tiny": {"discovery": section}}})
    assert message in str(raised.value)
    assert "models.tiny.discovery" in str(raised.value)


def test_a_model_needs_replicas_or_discovery():
    with pytest.raises(ConfigError, match=r"give models.tiny.replicas \(at least one\) or models.tiny.discovery"):
        config_from_dict({"models": {"tiny": {"replicas": []}}})


def test_discovery_needs_a_router_that_manages_pools():
    config = config_from_dict(
        {"models": {"tiny": {"discovery": {"dns": "a.b", "port": 80, "nameservers": ["127.0.0.1"]}}}}
    )
    with pytest.raises(ValueError, match="gateway.routing.factory:build_router"):
        build_discovery(config.discovery_models, build_simple_router(config.routing_models))


def test_the_cli_refuses_discovery_without_the_prefix_router(tmp_path, capsys):
    from gateway.cli import main

    path = tmp_path / "gateway.yaml"
    path.write_text("models: {tiny: {discovery: {dns: a.b, port: 80, nameservers: ['127.0.0.1']}}}\n")
    assert main(["--config", str(path)]) == 2
    assert "needs a router that manages replica pools" in capsys.readouterr().err


def test_health_answers_with_an_empty_pool(dns_server, tokenizer_dir):
    """No replica yet (engines still loading): the gateway serves, a request gets 503 with Retry-After, not a 500."""
    config = gateway_config([], tokenizer_dir, router="gateway.routing.factory:build_router")
    config["models"]["tiny"]["discovery"] = {"dns": NAME, "port": 8100, "nameservers": [dns_server.address]}
    with serve_gateway(config) as gw:
        admin = Admin(gw.url)
        key = admin.key(admin.tenant())
        assert httpx.get(gw.url + "/health").status_code == 200
        answer = httpx.post(
            gw.url + "/v1/chat/completions",
            headers={"authorization": f"Bearer {key}"},
            json={"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
        )
        assert answer.status_code == 503 and "retry-after" in answer.headers
        assert answer.json()["error"]["type"]
