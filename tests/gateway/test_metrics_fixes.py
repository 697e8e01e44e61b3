"""Metrics that read wrong before: 429s after a tenant's first one counted under an empty tenant, an upstream's
"your request is bad" counted as an upstream failure, `sluicegate_redis_up` 0 on a gateway that has no Redis,
`sluicegate_guardrail_actions_total` never counted, and /health and /metrics probes traced as requests."""

from __future__ import annotations

import httpx
import pytest

from sluicegate import tracing
from tests.gateway.conftest import Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.echo_upstream import EchoUpstream
from tests.gateway.servers import ThreadServer

CHAT = [{"role": "user", "content": "hello there"}]


def post(gw, key: str, body: dict) -> httpx.Response:
    return httpx.post(
        gw.url + "/v1/chat/completions", headers={"authorization": f"Bearer {key}"}, json=body, timeout=30
    )


def metric(gw, sample: str) -> float:
    """The value of the sample line that starts with `sample` (name and labels as Prometheus writes them), 0.0 when
    there is none."""
    for line in httpx.get(gw.url + "/metrics").text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_every_429_counts_under_its_tenant(gateway):
    admin = gateway.admin
    tenant = admin.tenant(rpm=1)
    key = admin.key(tenant)
    assert post(gateway, key, {"model": "tiny", "messages": CHAT, "max_tokens": 2}).status_code == 200
    for _ in range(3):  # the first refusal comes from the store, the next ones from the local pre-check
        assert post(gateway, key, {"model": "tiny", "messages": CHAT, "max_tokens": 2}).status_code == 429
    limited = f'sluicegate_requests_total{{model="tiny",status="429",tenant="{tenant}"}}'
    wait_until(lambda: metric(gateway, limited) == 3.0)
    assert metric(gateway, 'sluicegate_requests_total{model="",status="429",tenant=""}') == 0.0
    assert metric(gateway, f'sluicegate_ratelimit_rejections_total{{reason="requests",tenant="{tenant}"}}') == 3.0


def test_a_refusal_after_auth_counts_under_the_tenant(local_gateway):
    admin = local_gateway.admin
    tenant = admin.tenant()
    key = admin.key(tenant)
    assert post(local_gateway, key, {"model": "no-such-model", "messages": CHAT}).status_code == 404
    wait_until(lambda: metric(local_gateway, f'sluicegate_requests_total{{model="",status="404",tenant="{tenant}"}}'))


def test_client_errors_from_the_upstream_are_not_upstream_errors(local_gateway):
    admin = local_gateway.admin
    key = admin.key(admin.tenant())
    before_400 = metric(local_gateway, 'sluicegate_upstream_errors_total{kind="http_400"}')
    before_404 = metric(local_gateway, 'sluicegate_upstream_errors_total{kind="http_404"}')
    for status in (400, 422):
        body = {"model": "tiny", "messages": CHAT, "max_tokens": 2, "fake": {"status": status}}
        assert post(local_gateway, key, body).status_code == status  # passed on to the client as it is
    body = {"model": "tiny", "messages": CHAT, "max_tokens": 2, "fake": {"status": 404}}
    assert post(local_gateway, key, body).status_code == 404  # a model the upstream lacks: the deployment's fault
    assert metric(local_gateway, 'sluicegate_upstream_errors_total{kind="http_400"}') == before_400
    assert metric(local_gateway, 'sluicegate_upstream_errors_total{kind="http_422"}') == 0.0
    assert metric(local_gateway, 'sluicegate_upstream_errors_total{kind="http_404"}') == before_404 + 1


def test_redis_up_is_absent_without_redis(local_gateway, redis_gateway):
    assert "sluicegate_redis_up" not in httpx.get(local_gateway.url + "/metrics").text
    assert metric(redis_gateway, "sluicegate_redis_up") == 1.0


def test_health_and_metrics_are_not_traced(local_gateway):
    admin = local_gateway.admin
    key = admin.key(admin.tenant())
    exporter = tracing.install_in_memory_exporter()
    try:
        assert httpx.get(local_gateway.url + "/health").status_code == 200
        assert httpx.get(local_gateway.url + "/metrics").status_code == 200
        assert exporter.get_finished_spans() == ()
        assert post(local_gateway, key, {"model": "tiny", "messages": CHAT, "max_tokens": 2}).status_code == 200
        wait_until(lambda: any(s.name == tracing.GATEWAY_REQUEST for s in exporter.get_finished_spans()))
        assert {s.attributes.get("url.path") for s in exporter.get_finished_spans() if s.parent is None} == {
            "/v1/chat/completions"
        }
    finally:
        tracing.set_tracer_provider(None)


POLICIES = {
    "watch": {"pii_action": "detect", "output_pii_action": "redact"},
    "strict": {"pii_action": "block"},
    "stop": {"pii_action": "detect", "output_pii_action": "block"},
}
EMAIL = [{"role": "user", "content": "write to li.chen@example.com today"}]


@pytest.fixture(scope="module")
def guarded(tokenizer_dir):
    upstream = EchoUpstream()
    with ThreadServer(upstream.app) as echo:
        config = gateway_config(
            [echo.url], tokenizer_dir, guardrails={"engine": {"pii_engine": "fast"}, "policies": POLICIES}
        )
        with serve_gateway(config) as server:
            server.admin = Admin(server.url)
            yield server


def test_guardrail_actions_are_counted_once_per_request(guarded):
    admin = guarded.admin
    watch, strict, stop = (admin.key(admin.tenant(guardrails=name)) for name in ("watch", "strict", "stop"))
    whole = post(guarded, watch, {"model": "tiny", "messages": EMAIL, "max_tokens": 20})
    assert whole.status_code == 200 and "li.chen@example.com" not in whole.text
    streamed = post(guarded, watch, {"model": "tiny", "messages": EMAIL, "max_tokens": 20, "stream": True})
    assert streamed.status_code == 200 and "li.chen@example.com" not in streamed.text
    assert post(guarded, strict, {"model": "tiny", "messages": EMAIL}).status_code == 400
    blocked = post(guarded, stop, {"model": "tiny", "messages": EMAIL, "max_tokens": 20, "stream": True})
    assert "content_policy_violation" in blocked.text
    counts = {
        action: metric(guarded, f'sluicegate_guardrail_actions_total{{action="{action}"}}')
        for action in ("input_detect", "output_redact", "input_block", "output_block", "input_redact")
    }
    assert counts == {
        "input_detect": 3.0,
        "output_redact": 2.0,
        "input_block": 1.0,
        "output_block": 1.0,
        "input_redact": 0.0,
    }
