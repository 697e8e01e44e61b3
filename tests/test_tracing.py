"""Tracing helpers: one trace across two real HTTP hops via `traceparent`, read back through the SDK's in-memory
exporter; OTLP/HTTP export to a real loopback receiver; off by default."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sluicegate import tracing

CLIENT_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_TRACEPARENT = f"00-{CLIENT_TRACE_ID}-00f067aa0ba902b7-01"


@contextmanager
def serve(app) -> Iterator[str]:
    """A real uvicorn server on a free loopback port, in a thread; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("uvicorn exited before it started serving")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def engine_app() -> Starlette:
    async def complete(request: Request) -> JSONResponse:
        with tracing.server_span("engine", tracing.ENGINE_REQUEST, request.headers) as span:
            # The engine loop reports stage timings after the fact.
            start_ns = time.time_ns()
            parent = trace.set_span_in_context(span)
            for i, stage in enumerate(tracing.ENGINE_STAGES):
                tracing.record_span("engine", stage, start_ns + i * 1000, start_ns + (i + 1) * 1000, parent)
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/v1/completions", complete, methods=["POST"])])


def gateway_app(engine_url: str) -> Starlette:
    async def complete(request: Request) -> JSONResponse:
        with tracing.server_span("gateway", tracing.GATEWAY_REQUEST, request.headers, {"tenant": "acme"}):
            for stage in tracing.GATEWAY_STAGES[:-2]:
                with tracing.tracer("gateway").start_as_current_span(stage):
                    pass
            with tracing.tracer("gateway").start_as_current_span("upstream", kind=trace.SpanKind.CLIENT):
                async with httpx.AsyncClient() as client:
                    upstream = await client.post(
                        f"{engine_url}/v1/completions", json={}, headers=tracing.inject_headers({})
                    )
        return JSONResponse(upstream.json())

    return Starlette(routes=[Route("/v1/completions", complete, methods=["POST"])])


@pytest.fixture
def exporter():
    exporter = tracing.install_in_memory_exporter()
    yield exporter
    tracing.set_tracer_provider(None)


def spans_by_name(exporter) -> dict:
    return {span.name: span for span in exporter.get_finished_spans()}


def test_one_trace_across_gateway_and_engine(exporter):
    with serve(engine_app()) as engine_url, serve(gateway_app(engine_url)) as gateway_url:
        response = httpx.post(f"{gateway_url}/v1/completions", json={}, headers={"traceparent": CLIENT_TRACEPARENT})
    assert response.json() == {"ok": True}

    spans = spans_by_name(exporter)
    expected = {
        tracing.GATEWAY_REQUEST,
        tracing.ENGINE_REQUEST,
        "upstream",
        *tracing.ENGINE_STAGES,
        *tracing.GATEWAY_STAGES[:-2],
    }
    assert set(spans) == expected
    assert {format(s.context.trace_id, "032x") for s in spans.values()} == {CLIENT_TRACE_ID}
    # Parent links: client -> gateway.request -> upstream -> engine.request -> queue/prefill/decode.
    assert format(spans[tracing.GATEWAY_REQUEST].parent.span_id, "016x") == CLIENT_TRACEPARENT.split("-")[2]
    assert spans[tracing.GATEWAY_REQUEST].parent.is_remote
    assert spans["upstream"].parent.span_id == spans[tracing.GATEWAY_REQUEST].context.span_id
    assert spans[tracing.ENGINE_REQUEST].parent.span_id == spans["upstream"].context.span_id
    assert spans[tracing.ENGINE_REQUEST].parent.is_remote
    for stage in tracing.ENGINE_STAGES:
        assert spans[stage].parent.span_id == spans[tracing.ENGINE_REQUEST].context.span_id
    assert spans["prefill"].end_time - spans["prefill"].start_time == 1000
    assert spans[tracing.GATEWAY_REQUEST].attributes["tenant"] == "acme"
    assert spans[tracing.GATEWAY_REQUEST].resource.attributes["service.name"] == "sluicegate-test"


def test_without_traceparent_the_gateway_starts_a_new_trace(exporter):
    for headers in ({}, {"traceparent": "00-not-a-trace-01"}):
        exporter.clear()
        with tracing.server_span("gateway", tracing.GATEWAY_REQUEST, headers) as span:
            injected = tracing.inject_headers({})
        finished = exporter.get_finished_spans()[0]
        assert finished.parent is None
        assert format(span.get_span_context().trace_id, "032x") != CLIENT_TRACE_ID
        assert injected["traceparent"].split("-")[1] == format(finished.context.trace_id, "032x")


@pytest.mark.parametrize(
    "headers", [{"TraceParent": CLIENT_TRACEPARENT}, [(b"host", b"x"), (b"traceparent", CLIENT_TRACEPARENT.encode())]]
)
def test_extract_reads_mixed_case_names_and_raw_asgi_headers(headers):
    context = tracing.extract_context(headers)
    assert format(trace.get_current_span(context).get_span_context().trace_id, "032x") == CLIENT_TRACE_ID


def test_tracing_is_off_by_default(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert tracing.configure_tracing(tracing.TracingConfig("sluicegate-gateway")) is None
    assert not tracing.enabled()
    with tracing.tracer("gateway").start_as_current_span("auth") as span:
        assert not span.is_recording()
    assert tracing.inject_headers({}) == {}


def test_otlp_endpoint_from_config_or_environment(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert tracing.otlp_traces_endpoint(tracing.TracingConfig("s")) == "http://collector:4318/v1/traces"
    config = tracing.TracingConfig("s", otlp_endpoint="http://otel:4318")
    assert tracing.otlp_traces_endpoint(config) == "http://otel:4318/v1/traces"
    with pytest.raises(ValueError, match="sample_ratio"):
        tracing.TracingConfig("s", sample_ratio=2.0)


def test_otlp_http_export_reaches_a_collector(monkeypatch):
    received: list[bytes] = []

    async def collect(request: Request) -> Response:
        received.append(await request.body())
        return Response(b"", media_type="application/x-protobuf")

    collector = Starlette(routes=[Route("/v1/traces", collect, methods=["POST"])])
    with serve(collector) as collector_url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector_url)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "engine-7")  # the standard variable beats the built-in name
        provider = tracing.configure_tracing(tracing.TracingConfig("sluicegate-engine"))
        assert provider is not None
        try:
            with tracing.server_span("engine", tracing.ENGINE_REQUEST, {"traceparent": CLIENT_TRACEPARENT}):
                pass
            assert provider.force_flush(timeout_millis=10_000)
        finally:
            tracing.set_tracer_provider(None)
    request = ExportTraceServiceRequest.FromString(b"".join(received))
    (resource_spans,) = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
    (span,) = resource_spans.scope_spans[0].spans
    assert service == "engine-7"
    assert span.name == tracing.ENGINE_REQUEST and span.trace_id.hex() == CLIENT_TRACE_ID


def middleware_app() -> Starlette:
    async def complete(request: Request) -> JSONResponse:
        with tracing.tracer("gateway").start_as_current_span("route"):
            forwarded = tracing.inject_headers({})
        status = 503 if request.query_params.get("fail") else 200
        return JSONResponse(forwarded, status_code=status, headers={"x-request-id": "req-42"})

    app = Starlette(routes=[Route("/v1/completions", complete, methods=["POST"])])
    return tracing.TracingMiddleware(app, "gateway", tracing.GATEWAY_REQUEST)


def test_middleware_opens_a_server_span_that_stage_spans_nest_under(exporter):
    with serve(middleware_app()) as url:
        ok = httpx.post(f"{url}/v1/completions", headers={"traceparent": CLIENT_TRACEPARENT})
        failed = httpx.post(f"{url}/v1/completions?fail=1")
    requests = [s for s in exporter.get_finished_spans() if s.name == tracing.GATEWAY_REQUEST]
    routes = [s for s in exporter.get_finished_spans() if s.name == "route"]
    assert len(requests) == 2 and len(routes) == 2
    first, second = requests
    assert first.kind == trace.SpanKind.SERVER and format(first.context.trace_id, "032x") == CLIENT_TRACE_ID
    assert first.attributes["http.response.status_code"] == 200 and first.attributes["url.path"] == "/v1/completions"
    assert first.attributes["sluicegate.request_id"] == "req-42"
    assert routes[0].parent.span_id == first.context.span_id
    # The downstream traceparent names the stage span that was current when it was injected.
    assert ok.json()["traceparent"].split("-")[2] == format(routes[0].context.span_id, "016x")
    assert second.parent is None and second.status.status_code == trace.StatusCode.ERROR
    assert failed.status_code == 503


def test_middleware_passes_through_while_tracing_is_off():
    tracing.set_tracer_provider(None)
    with serve(middleware_app()) as url:
        response = httpx.post(f"{url}/v1/completions", headers={"traceparent": CLIENT_TRACEPARENT})
    assert response.status_code == 200 and response.json() == {}
