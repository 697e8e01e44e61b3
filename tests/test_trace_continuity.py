"""One trace across the gateway and a real engine replica: the client's request through the gateway (auth,
tokenize, admission, route, upstream, stream spans) continues on the replica via `traceparent` (engine.request
with queue, prefill and decode under it), read back through the SDK's in-memory exporter."""

from __future__ import annotations

import httpx
import openai
import pytest

from sluicegate import tracing
from tests.engine.server.live import LiveServer, make_engine
from tests.gateway.conftest import Admin, gateway_config, serve_gateway


@pytest.fixture
def exporter():
    exporter = tracing.install_in_memory_exporter()
    yield exporter
    tracing.set_tracer_provider(None)


def test_one_trace_from_gateway_stages_to_engine_stages(tiny_model_dir, exporter):
    engine = make_engine(tiny_model_dir)
    replica = LiveServer(engine).start()
    try:
        config = gateway_config([replica.url], tiny_model_dir)
        config["models"]["tiny"]["upstream_model"] = engine.model_name
        with serve_gateway(config) as gw:
            admin = Admin(gw.url)
            key = admin.key(admin.tenant(rpm=600, input_tpm=100_000, output_tpm=10_000))
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=60)
            exporter.clear()
            stream = client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=6, stream=True
            )
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) is not None
            httpx.get(gw.url + "/health")  # let the stream's spans end
    finally:
        replica.stop()
    spans = exporter.get_finished_spans()
    by_name = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    gateway_request = [
        s
        for s in by_name.get(tracing.GATEWAY_REQUEST, [])
        if s.attributes.get("url.path", "").endswith("/chat/completions")
    ]
    assert gateway_request, sorted(by_name)
    trace_id = gateway_request[0].context.trace_id
    in_trace = {s.name for s in spans if s.context.trace_id == trace_id}
    for stage in ("auth", "tokenize", "admission", "route", "upstream", "stream"):
        assert stage in in_trace, (stage, sorted(in_trace))
    assert tracing.ENGINE_REQUEST in in_trace
    for stage in tracing.ENGINE_STAGES:
        assert stage in in_trace, (stage, sorted(in_trace))
    engine_request = next(s for s in spans if s.name == tracing.ENGINE_REQUEST and s.context.trace_id == trace_id)
    queue = next(s for s in spans if s.name == "queue" and s.context.trace_id == trace_id)
    assert queue.parent.span_id == engine_request.context.span_id
    assert engine_request.parent is not None and engine_request.parent.span_id != engine_request.context.span_id
