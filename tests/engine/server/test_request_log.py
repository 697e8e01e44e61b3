"""The replica's request log (one JSON line per generation request, refusals too, never text) and its tracing
middleware leaving /health and /metrics untraced, on a real replica of the tiny model."""

from __future__ import annotations

import logging
import uuid

from engine.server.request_log import REQUEST_LOGGER
from sluicegate import tracing
from tests.engine.server.live import wait_until
from tests.log_capture import captured


def test_one_line_per_generation_request_without_text(live_server):
    secret = f"secret-{uuid.uuid4().hex}"
    with captured(REQUEST_LOGGER) as lines, captured("", level=logging.DEBUG) as others:
        answer = live_server.http.post(
            "/v1/completions",
            headers={"x-request-id": "gw-req-1"},
            json={"prompt": f"repeat {secret}", "max_tokens": 8, "ignore_eos": True},
        )
        assert answer.status_code == 200
        streamed = live_server.http.post(
            "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": secret}],
                "max_tokens": 4,
                "ignore_eos": True,
                "stream": True,
            },
        )
        assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\n\n")
        refused = live_server.http.post("/v1/completions", json={"prompt": "x", "max_tokens": -3})
        assert refused.status_code == 400
        assert live_server.http.get("/health").status_code == 200  # probes are not logged
        wait_until(lambda: len([r for r in lines.records() if "duration_ms" in r]) == 3, what="three lines")
    records = [r for r in lines.records() if "duration_ms" in r]
    (whole,) = [r for r in records if r["request_id"] == "gw-req-1"]
    (stream,) = [r for r in records if r["stream"] is True]
    (bad,) = [r for r in records if r["status"] == 400]
    assert whole["request_id"] == "gw-req-1" and whole["endpoint"] == "/v1/completions"
    assert whole["status"] == 200 and whole["stream"] is False and whole["model"] == live_server.replica.model_name
    usage = answer.json()["usage"]
    assert whole["prompt_tokens"] == usage["prompt_tokens"] and whole["completion_tokens"] == 8
    assert whole["cached_tokens"] == usage["prompt_tokens_details"]["cached_tokens"]
    assert 0 <= whole["ttft_ms"] <= whole["duration_ms"]
    assert (
        stream["stream"] is True and stream["endpoint"] == "/v1/chat/completions" and stream["completion_tokens"] == 4
    )
    assert len(stream["request_id"]) == 32  # none was sent: the replica's own
    assert bad["status"] == 400 and bad["completion_tokens"] == 0 and bad["ttft_ms"] is None
    text = answer.json()["choices"][0]["text"]
    assert others.lines  # the rest of the process was heard at debug level, and carried no text either
    for line in lines.lines + others.lines:
        assert secret not in line
        assert len(text) < 12 or text not in line


def test_request_log_can_be_turned_off(tiny_model_dir):
    from tests.engine.server.live import LiveServer, make_engine

    server = LiveServer(make_engine(tiny_model_dir), request_log=False).start()
    try:
        with captured(REQUEST_LOGGER) as lines:
            response = server.http.post("/v1/completions", json={"prompt": "hello", "max_tokens": 2})
            assert response.status_code == 200
            assert server.http.get("/v1/models").status_code == 200  # the first request is over on the server too
        assert lines.lines == []
    finally:
        server.stop()


def test_probes_are_not_traced(live_server):
    exporter = tracing.install_in_memory_exporter()
    try:
        assert live_server.http.get("/health").status_code == 200
        assert live_server.http.get("/metrics").status_code == 200
        assert exporter.get_finished_spans() == ()
        assert live_server.http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}).status_code == 200
        wait_until(lambda: any(s.name == tracing.ENGINE_REQUEST for s in exporter.get_finished_spans()), what="a span")
    finally:
        tracing.set_tracer_provider(None)
