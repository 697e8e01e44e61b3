"""OpenTelemetry stage spans of the request path (names in sluicegate.tracing.GATEWAY_STAGES). While tracing is
off (the default), `stage` hands back one shared no-op context manager: no span objects on the hot path."""

from __future__ import annotations

import contextlib

from sluicegate import tracing

_OFF = contextlib.nullcontext()


def stage(name: str) -> contextlib.AbstractContextManager[object]:
    if not tracing.enabled():
        return _OFF
    return tracing.tracer("gateway").start_as_current_span(name)


def upstream_trace_headers(headers: dict[str, str], client_traceparent: bytes | None) -> None:
    """W3C traceparent for the upstream: the current span's while tracing, else the client's own, passed on."""
    if tracing.enabled():
        tracing.inject_headers(headers)
    elif client_traceparent:
        headers["traceparent"] = client_traceparent.decode("latin-1")
