"""EndpointSlice discovery against a stand-in for the Kubernetes API on loopback (HTTPS with a CA of its own, the
service-account token from a file): parsing the real EndpointSliceList shape, replicas joining and leaving a gateway,
two Services as a disaggregated model's two pools, and an API that fails or is unreachable keeping the last known
set."""

from __future__ import annotations

import logging

import httpx
import pytest

from gateway.config import config_from_dict
from gateway.routing.base import Role
from gateway.routing.config import parse_models_config
from gateway.routing.discovery import DiscoveryConfig, DiscoveryError, Endpoint
from gateway.routing.discovery.kubernetes import EndpointSliceSource, parse_endpoint_slices
from gateway.routing.discovery.loop import DiscoveryLoop
from gateway.routing.discovery.manager import build_discovery
from gateway.routing.factory import build_router
from gateway.routing.router import PrefixRouter
from tests.gateway.conftest import Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.fake_upstream import FakeUpstream
from tests.gateway.routing.discovery_servers import (
    EndpointSliceApi,
    LoopbackServer,
    endpoint_slice,
    pod_endpoint,
    replicas_on_one_port,
    self_signed_cert,
)

SERVICE, NAMESPACE = "sg-sluicegate-engine-headless", "llm"


@pytest.fixture
def api(tmp_path):
    """The API stand-in over HTTPS, with the files a Pod's service account mounts: token and ca.crt."""
    cert, key = self_signed_cert(tmp_path)
    (tmp_path / "token").write_text("token-1\n")
    fake = EndpointSliceApi(token="token-1")
    with LoopbackServer(fake.app, certfile=cert, keyfile=key) as server:
        fake.url, fake.ca_file, fake.token_file, fake.server = server.url, str(cert), str(tmp_path / "token"), server
        yield fake


def k8s_discovery(api, **target) -> dict:
    return {
        "kubernetes": {
            "service": SERVICE, "namespace": NAMESPACE, "port_name": "http", "api_url": api.url,
            "token_file": api.token_file, "ca_file": api.ca_file, "timeout_s": 2, **target,
        },
        "interval_s": 0.05,
        "kv_events": False,
    }  # fmt: skip


def test_parses_ready_endpoints_of_every_slice_by_port_name():
    body = {
        "kind": "EndpointSliceList",
        "apiVersion": "discovery.k8s.io/v1",
        "metadata": {"resourceVersion": "7"},
        "items": [
            {
                **endpoint_slice(SERVICE, NAMESPACE, 8100, []),
                "ports": [{"name": "metrics", "port": 9000, "protocol": "TCP"}, {"name": "http", "port": 8100}],
                "endpoints": [
                    pod_endpoint("engine-0", "10.0.0.5"),
                    pod_endpoint("engine-1", "10.0.0.6", ready=False),  # loading its model
                    pod_endpoint("engine-2", "10.0.0.7", ready=False, terminating=True),  # draining
                    pod_endpoint("engine-3", "10.0.0.8", ready=None),  # unset: ready, the API says
                    {"addresses": ["10.0.0.9"], "conditions": {"ready": True}},  # no Pod behind it
                ],
            },
            {
                **endpoint_slice(SERVICE, NAMESPACE, 8100, [pod_endpoint("engine-4", "fd00::4")]),
                "addressType": "IPv6",
            },
            endpoint_slice(SERVICE, NAMESPACE, 7000, [pod_endpoint("other", "10.0.1.1")], port_name="grpc"),
        ],
    }
    assert parse_endpoint_slices(body, "http") == {
        Endpoint("engine-0", "http://10.0.0.5:8100"),
        Endpoint("engine-3", "http://10.0.0.8:8100"),
        Endpoint("10.0.0.9-8100", "http://10.0.0.9:8100"),
        Endpoint("engine-4", "http://[fd00::4]:8100"),
    }
    # Without a port name a slice must have a single port; with one, the others' endpoints are not this service.
    with pytest.raises(ValueError, match="set discovery.kubernetes.port_name"):
        parse_endpoint_slices(body, None)
    assert parse_endpoint_slices({"items": []}, "http") == frozenset()


@pytest.mark.parametrize(
    "body, message",
    [
        ({"kind": "Status"}, "not an EndpointSliceList"),
        ({"items": ["x"]}, "not an object"),
        ({"items": [endpoint_slice(SERVICE, NAMESPACE, 8100, [{"conditions": {}}])]}, "without addresses"),
        ({"items": [{"ports": [{"name": "http", "port": "8100"}], "endpoints": []}]}, "no integer `port`"),
    ],
)
def test_malformed_lists_are_refused(body, message):
    with pytest.raises(ValueError, match=message):
        parse_endpoint_slices(body, "http")


def test_replicas_join_and_leave_a_gateway(api, tokenizer_dir):
    fake_2, fake_3 = FakeUpstream(), FakeUpstream()
    with replicas_on_one_port([fake_2.app, fake_3.app]) as (port, _):
        api.slices[(NAMESPACE, SERVICE)] = [
            endpoint_slice(SERVICE, NAMESPACE, port, [pod_endpoint("engine-0", "127.0.0.2")])
        ]
        config = gateway_config([], tokenizer_dir, router="gateway.routing.factory:build_router", debug_headers=True)
        config["models"]["tiny"]["discovery"] = k8s_discovery(api)
        with serve_gateway(config) as gw:
            admin = Admin(gw.url)
            key = admin.key(admin.tenant())

            def replicas() -> dict[str, tuple[str, str]]:
                data = admin.http.get("/models/tiny/replicas").json()["data"]
                return {r["name"]: (r["url"], r["state"]) for r in data}

            def chat() -> str:
                answer = httpx.post(
                    gw.url + "/v1/chat/completions",
                    headers={"authorization": f"Bearer {key}"},
                    timeout=20,
                    json={"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
                )
                assert answer.status_code == 200, answer.text
                return answer.headers["x-sluicegate-replica"]

            assert replicas() == {"engine-0": (f"http://127.0.0.2:{port}", "active")}
            assert chat() == "engine-0"
            # engine-1 becomes ready; engine-0 starts terminating (ready false): it leaves, engine-1 serves.
            api.slices[(NAMESPACE, SERVICE)] = [
                endpoint_slice(
                    SERVICE,
                    NAMESPACE,
                    port,
                    [
                        pod_endpoint("engine-0", "127.0.0.2", ready=False, terminating=True),
                        pod_endpoint("engine-1", "127.0.0.3"),
                    ],
                )
            ]
            wait_until(lambda: replicas() == {"engine-1": (f"http://127.0.0.3:{port}", "active")})
            assert {chat() for _ in range(4)} == {"engine-1"}
            assert len(fake_3.received) == 4
            # Every call named the service and carried the token.
            assert {(ns, sel, auth) for ns, sel, auth in api.requests} == {
                (NAMESPACE, f"kubernetes.io/service-name={SERVICE}", "Bearer token-1")
            }


async def test_an_unreachable_api_keeps_the_last_set_and_logs(api, caplog):
    api.slices[(NAMESPACE, SERVICE)] = [
        endpoint_slice(
            SERVICE, NAMESPACE, 8100, [pod_endpoint("engine-0", "10.0.0.5"), pod_endpoint("engine-1", "10.0.0.6")]
        )
    ]
    router = PrefixRouter(parse_models_config({"tiny": {"replicas": []}}))
    source = EndpointSliceSource(DiscoveryConfig.model_validate(k8s_discovery(api)))
    loop = DiscoveryLoop("tiny", source, router, interval_s=1.0, kv_events=False)
    await loop.tick()
    assert sorted(r.name for r in router.replicas("tiny")) == ["engine-0", "engine-1"]

    with caplog.at_level(logging.WARNING, logger="gateway.routing.discovery.loop"):
        api.status = 500  # the API server answers, badly
        await loop.tick()
        assert "HTTP 500" in (loop.last_error or "")
        api.status = 200
        api.token = "token-2"  # the token rotated on the server, not yet in the file: 401
        await loop.tick()
        assert "HTTP 401" in (loop.last_error or "")
        api.server.__exit__()  # the API server is gone: connection refused
        await loop.tick()
        assert loop.last_error is not None and "EndpointSlices of llm/" in loop.last_error
    assert sorted(r.name for r in router.replicas("tiny")) == ["engine-0", "engine-1"]
    # This loop's warnings only: the logger is shared, and a gateway of an earlier test may still be shutting down.
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and SERVICE in r.getMessage()]
    assert len(warnings) == 3 and all("keeping its 2 replica(s)" in w for w in warnings)
    await source.close()


async def test_two_services_with_pods_of_one_name_are_two_pools(api):
    """A disaggregated model's prefill and decode Services (here in two namespaces, each with a Pod `engine-0`): each
    entry's loop adds its Pods under its prefix and role, and a Pod leaving one Service leaves that pool only."""
    decode_ns = "llm-decode"
    api.slices[(NAMESPACE, SERVICE)] = [
        endpoint_slice(
            SERVICE, NAMESPACE, 8100, [pod_endpoint("engine-0", "10.0.0.5"), pod_endpoint("engine-1", "10.0.0.6")]
        )
    ]
    api.slices[(decode_ns, SERVICE)] = [
        endpoint_slice(SERVICE, decode_ns, 8100, [pod_endpoint("engine-0", "10.0.1.5")])
    ]
    prefill = {**k8s_discovery(api), "role": "prefill", "interval_s": 60}  # the test ticks the loops itself
    decode = {**k8s_discovery(api, namespace=decode_ns), "role": "decode", "interval_s": 60}
    config = config_from_dict(
        {"router": "gateway.routing.factory:build_router", "models": {"tiny": {"discovery": [prefill, decode]}}}
    )
    router = build_router(config.routing_models)
    discovery = build_discovery(config.discovery_models, router)
    await discovery.start()
    try:
        assert {(r.name, r.url, r.role) for r in router.replicas("tiny")} == {
            ("prefill-engine-0", "http://10.0.0.5:8100", Role.PREFILL),
            ("prefill-engine-1", "http://10.0.0.6:8100", Role.PREFILL),
            ("decode-engine-0", "http://10.0.1.5:8100", Role.DECODE),
        }
        api.slices[(NAMESPACE, SERVICE)] = [
            endpoint_slice(
                SERVICE,
                NAMESPACE,
                8100,
                [
                    pod_endpoint("engine-0", "10.0.0.5", ready=False, terminating=True),
                    pod_endpoint("engine-1", "10.0.0.6"),
                ],
            )
        ]
        for loop in discovery.loops:
            await loop.tick()
        assert sorted(r.name for r in router.replicas("tiny")) == ["decode-engine-0", "prefill-engine-1"]
    finally:
        await discovery.close()


async def test_the_token_file_is_read_on_every_call(api):
    """Projected service-account tokens rotate: a poll after the file changed sends the new token."""
    api.slices[(NAMESPACE, SERVICE)] = [
        endpoint_slice(SERVICE, NAMESPACE, 8100, [pod_endpoint("engine-0", "10.0.0.5")])
    ]
    source = EndpointSliceSource(DiscoveryConfig.model_validate(k8s_discovery(api)))
    assert {e.name for e in await source.resolve()} == {"engine-0"}
    api.token = "token-2"
    with open(api.token_file, "w") as f:
        f.write("token-2")
    assert {e.name for e in await source.resolve()} == {"engine-0"}
    assert [auth for _, _, auth in api.requests] == ["Bearer token-1", "Bearer token-2"]
    await source.close()


async def test_a_certificate_not_signed_by_the_ca_is_refused(api, tmp_path):
    (tmp_path / "other").mkdir()
    other_ca, _ = self_signed_cert(tmp_path / "other")
    source = EndpointSliceSource(DiscoveryConfig.model_validate(k8s_discovery(api, ca_file=str(other_ca))))
    with pytest.raises(DiscoveryError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        await source.resolve()
    await source.close()


def test_outside_a_cluster_without_api_url_the_config_is_refused(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = DiscoveryConfig.model_validate({"kubernetes": {"service": SERVICE, "namespace": NAMESPACE}})
    with pytest.raises(ValueError, match="KUBERNETES_SERVICE_HOST is not set"):
        EndpointSliceSource(config)
