"""A freshly started replica's /metrics already holds every vLLM series, at zero, before any request.

Dashboards `rate()` over counters and inference schedulers read the queue gauges from the first scrape: a series that
only appears after the first engine step breaks both (and drops the increments of its first interval).
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.engine.server.live import LiveServer, make_engine

_NUM_KV_BLOCKS = 64

# Sample name -> value before any request; the names vLLM's dashboards read (docs/architecture.md, "Engine replica
# HTTP API").
_STARTUP_SAMPLES = {
    "vllm:num_requests_running": 0.0,
    "vllm:num_requests_waiting": 0.0,
    "vllm:num_requests_swapped": 0.0,
    "vllm:kv_cache_usage_perc": 0.0,
    "vllm:prefix_cache_queries_total": 0.0,
    "vllm:prefix_cache_hits_total": 0.0,
    "vllm:num_preemptions_total": 0.0,
    "vllm:prompt_tokens_total": 0.0,
    "vllm:generation_tokens_total": 0.0,
    "vllm:time_to_first_token_seconds_count": 0.0,
    "vllm:inter_token_latency_seconds_count": 0.0,
    "vllm:e2e_request_latency_seconds_count": 0.0,
    "vllm:request_queue_time_seconds_count": 0.0,
    "sluicegate_engine_kv_blocks_total": float(_NUM_KV_BLOCKS),  # the pool's real size, not a placeholder zero
    "sluicegate_engine_kv_blocks_free": float(_NUM_KV_BLOCKS),
}


def _scrape(server: LiveServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value of every sample on /metrics."""
    text = server.http.get("/metrics").text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture(scope="module")
def fresh_server(tiny_model_dir):
    server = LiveServer(make_engine(tiny_model_dir, num_kv_blocks=_NUM_KV_BLOCKS, speculative_method="ngram")).start()
    yield server
    server.stop()


def test_every_series_is_present_at_zero_before_any_request(fresh_server):
    samples = _scrape(fresh_server)
    values = {name: value for (name, _labels), value in samples.items()}  # each name above has one sample
    missing = sorted(set(_STARTUP_SAMPLES) - set(values))
    assert not missing, f"absent from a fresh replica's /metrics: {missing}"
    assert {name: values[name] for name in _STARTUP_SAMPLES} == _STARTUP_SAMPLES
    for finish_reason in ("stop", "length", "abort"):
        labels = (("finished_reason", finish_reason), ("model_name", fresh_server.llm_engine.model_name))
        assert samples[("vllm:request_success_total", labels)] == 0.0
    # Speculative decoding is on: its counters are there from the start too.
    assert values["vllm:spec_decode_num_drafts_total"] == 0.0
    assert values["vllm:spec_decode_num_draft_tokens_total"] == 0.0
