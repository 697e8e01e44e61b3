"""OpenTelemetry set-up shared by the gateway and the engine (torch-free).

One trace spans both processes: the gateway injects a W3C `traceparent` header into its upstream request and the
engine continues the trace from it.

    gateway.request                              (server span, parent: the client's traceparent if it sent one)
      auth, guardrails.input, tokenize, admission, [guardrails.alongside], route, upstream, stream
                         --- traceparent --->    engine.request (server span)
                                                   queue, prefill, decode

Exporting is off by default: `tracer(name)` hands out no-op tracers until `configure_tracing` installs a provider,
which it does only when an OTLP endpoint is configured (argument, or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT /
OTEL_EXPORTER_OTLP_ENDPOINT). Tests call `install_in_memory_exporter()` and read finished spans from it.

A service wires it in two lines: `configure_tracing(TracingConfig("sluicegate-gateway"))` at start-up and
`TracingMiddleware(app, "gateway", GATEWAY_REQUEST)` around its ASGI app; stage spans opened inside a request
(`tracer("gateway").start_as_current_span("route")`) nest under the request span, and `inject_headers(headers)`
on an outgoing request carries the current span to the next service.

The provider lives here rather than in OpenTelemetry's global slot, which can be set only once per process: tests
that run a gateway and two engines in one process swap providers freely.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.datastructures import State
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Span names, so the gateway, the engine, the docs and the Grafana/Jaeger views agree.
GATEWAY_REQUEST = "gateway.request"
GATEWAY_STAGES = (
    "auth",
    "guardrails.input",
    "tokenize",
    "admission",
    "guardrails.alongside",
    "route",
    "upstream",
    "stream",
)
ENGINE_REQUEST = "engine.request"
ENGINE_STAGES = ("queue", "prefill", "decode")

_propagator = TraceContextTextMapPropagator()
_provider: TracerProvider | None = None
_noop_tracer = trace.NoOpTracer()


@dataclass(frozen=True)
class TracingConfig:
    service_name: str
    """Resource `service.name` of every span (e.g. sluicegate-gateway); OTEL_SERVICE_NAME, when set, wins."""
    otlp_endpoint: str | None = None
    """OTLP/HTTP collector base URL (http://otel-collector:4318); None: the OTEL_EXPORTER_OTLP_* variables, else off."""
    sample_ratio: float = 1.0
    """Share of new traces recorded; a request that arrives with a sampled traceparent is always recorded."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.sample_ratio <= 1.0:
            raise ValueError(f"tracing sample_ratio={self.sample_ratio}: use a share in [0, 1]")


def otlp_traces_endpoint(config: TracingConfig) -> str | None:
    """Where spans go: the config's base URL + /v1/traces, else the standard OTLP environment variables."""
    if config.otlp_endpoint:
        base = config.otlp_endpoint.rstrip("/")
        return base if base.endswith("/v1/traces") else f"{base}/v1/traces"
    if os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").rstrip("/")
    return f"{base}/v1/traces" if base else None


def configure_tracing(config: TracingConfig) -> TracerProvider | None:
    """Install an OTLP/HTTP-exporting provider when an endpoint is configured; return it (None: tracing stays off)."""
    endpoint = otlp_traces_endpoint(config)
    if endpoint is None:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = _new_provider(os.environ.get("OTEL_SERVICE_NAME") or config.service_name, config.sample_ratio)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    set_tracer_provider(provider)
    return provider


def install_in_memory_exporter(service_name: str = "sluicegate-test") -> InMemorySpanExporter:
    """For tests: record every span synchronously in memory (`exporter.get_finished_spans()`)."""
    exporter = InMemorySpanExporter()
    provider = _new_provider(service_name, sample_ratio=1.0)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    set_tracer_provider(provider)
    return exporter


def set_tracer_provider(provider: TracerProvider | None) -> None:
    """Swap the provider (None: tracing off). The previous one is flushed and shut down."""
    global _provider
    previous, _provider = _provider, provider
    if previous is not None and previous is not provider:
        previous.shutdown()


def enabled() -> bool:
    """Whether spans are recorded at all: hot paths skip building span attributes when not."""
    return _provider is not None


def tracer(name: str) -> trace.Tracer:
    """The tracer for an instrumentation scope (`gateway`, `engine`); a no-op one while tracing is off."""
    return _provider.get_tracer(name) if _provider is not None else _noop_tracer


def _new_provider(service_name: str, sample_ratio: float) -> TracerProvider:
    return TracerProvider(
        resource=Resource.create({"service.name": service_name}),
        sampler=ParentBased(TraceIdRatioBased(sample_ratio)),
    )


class _CaseInsensitiveGetter(Getter[Mapping[str, str]]):
    """Reads `traceparent` from any header mapping: Starlette/httpx Headers (case-insensitive) or a plain dict."""

    def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None:
            value = next((v for k, v in carrier.items() if k.lower() == key), None)
        return None if value is None else [value]

    def keys(self, carrier: Mapping[str, str]) -> list[str]:
        return list(carrier.keys())


_getter = _CaseInsensitiveGetter()


AsgiHeaders = Iterable[tuple[bytes, bytes]]
_TRACE_HEADERS = (b"traceparent", b"tracestate")


def extract_context(headers: Mapping[str, str] | AsgiHeaders) -> Context:
    """The remote parent from W3C `traceparent`/`tracestate` headers (an empty context when absent or malformed).
    `headers` is a mapping (Starlette/httpx Headers, dict) or an ASGI scope's raw `headers` list."""
    if not isinstance(headers, Mapping):
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers if k in _TRACE_HEADERS}
    return _propagator.extract(headers, getter=_getter)


def inject_headers(headers: MutableMapping[str, str], context: Context | None = None) -> MutableMapping[str, str]:
    """Add `traceparent` (and `tracestate`) for the current span, or `context`'s, to `headers`; return them."""
    _propagator.inject(headers, context=context)
    return headers


@contextmanager
def server_span(
    scope_name: str,
    span_name: str,
    headers: Mapping[str, str] | AsgiHeaders,
    attributes: Mapping[str, str | int | float | bool] | None = None,
) -> Iterator[trace.Span]:
    """A SERVER span continuing the caller's trace from its headers, current for the duration of the block."""
    with tracer(scope_name).start_as_current_span(
        span_name, context=extract_context(headers), kind=trace.SpanKind.SERVER, attributes=attributes
    ) as span:
        yield span


def record_span(
    scope_name: str,
    span_name: str,
    start_time_ns: int,
    end_time_ns: int,
    parent: Context | None = None,
    attributes: Mapping[str, str | int | float | bool] | None = None,
) -> None:
    """A finished span from timestamps taken elsewhere (the engine loop times queue/prefill/decode per request and
    reports them when the request ends, instead of holding spans open across steps). Times: time.time_ns()."""
    span = tracer(scope_name).start_span(span_name, context=parent, start_time=start_time_ns, attributes=attributes)
    span.end(end_time=end_time_ns)


UNTRACED_PATHS = frozenset({"/health", "/metrics"})
"""Probes and scrapes: every router and Prometheus polls them every few seconds, and as root traces of their own they
would bury the requests' traces (and the sampling budget)."""


class TracingMiddleware:
    """Plain ASGI: one SERVER span per HTTP request, continuing the caller's `traceparent`, with the method, path,
    status code and the response's `x-request-id` as attributes. Passes requests straight through while tracing is
    off, and always for `untraced_paths` (/health and /metrics by default). The span stays current for the whole call,
    so stage spans nest under it and streams are timed to their end.
    """

    state: State
    """The wrapped app's state, where the builder sets it (build_app: the Starlette app's `app.state`)."""

    def __init__(
        self, app: ASGIApp, scope_name: str, span_name: str, untraced_paths: frozenset[str] = UNTRACED_PATHS
    ) -> None:
        self.app = app
        self.scope_name = scope_name
        self.span_name = span_name
        self.untraced_paths = untraced_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _provider is None or scope["path"] in self.untraced_paths:
            await self.app(scope, receive, send)
            return
        attributes = {"http.request.method": scope["method"], "url.path": scope["path"]}
        with server_span(self.scope_name, self.span_name, scope["headers"], attributes) as span:

            async def send_and_record(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = message["status"]
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(StatusCode.ERROR)
                    for key, value in message.get("headers", ()):
                        if key == b"x-request-id":
                            span.set_attribute("sluicegate.request_id", value.decode("latin-1"))
                await send(message)

            await self.app(scope, receive, send_and_record)
