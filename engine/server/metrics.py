"""Prometheus metrics with vLLM's names, so existing dashboards and inference schedulers read this replica unchanged,
plus `sluicegate_engine_*` for what vLLM does not name (swaps, chunked prefill steps, step time, rejections).

Engine-wide counters and gauges come from the latest EngineStats the engine thread published (a collector reads
them at scrape time, so the engine's own totals are the single source of truth); per-request latency histograms are
observed on the event loop as outputs arrive. Each app has its own registry: two servers in one process (tests)
never share series.

Every series exists from start-up, at zero where nothing has happened yet: a dashboard's `rate()` and an inference
scheduler's queue-depth read need the series before the first request, and a series that appears mid-run loses the
increments of its first scrape interval.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from engine.spec_decode.metrics import metric_families as spec_decode_metric_families
from engine.stats import EngineStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0)
_ITL_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
_E2E_BUCKETS_S = (0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0)

# Every finish reason the engine reports, pre-created so `vllm:request_success_total` shows each at zero from start-up.
_FINISH_REASONS = ("stop", "length", "abort")

# (metric name, EngineStats field, help); counters are exported with the `_total` suffix.
_COUNTERS = (
    ("vllm:prompt_tokens", "prompt_tokens_total", "Prefill tokens processed."),
    ("vllm:generation_tokens", "generation_tokens_total", "Generation tokens produced."),
    ("vllm:prefix_cache_queries", "prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache."),
    ("vllm:prefix_cache_hits", "prefix_cache_hits_total", "Prompt tokens found in the prefix cache."),
    ("vllm:num_preemptions", "num_preemptions_total", "Sequences preempted for lack of KV blocks."),
    ("sluicegate_engine_swapped_out", "num_swapped_out_total", "Sequences swapped out to host memory."),
    ("sluicegate_engine_swapped_in", "num_swapped_in_total", "Sequences swapped back in from host memory."),
    ("sluicegate_engine_chunked_prefill_steps", "num_chunked_prefill_steps_total", "Steps that ran a prefill chunk."),
    ("sluicegate_engine_kv_handoffs_read", "kv_handoffs_read_total", "Prefill handoffs a decode replica read."),
    ("sluicegate_engine_kv_handoffs_expired", "kv_handoffs_expired_total", "Prefill handoffs freed unread."),
)
_GAUGES = (
    ("vllm:num_requests_running", "num_running", "Sequences in the running batch."),
    ("vllm:num_requests_waiting", "num_waiting", "Sequences waiting to be scheduled."),
    ("vllm:num_requests_swapped", "num_swapped", "Sequences swapped out to host memory."),
    ("vllm:kv_cache_usage_perc", "kv_cache_usage", "Fraction of KV-cache blocks in use (1 = full)."),
    ("sluicegate_engine_kv_blocks_total", "num_blocks_total", "KV-cache blocks in the pool."),
    ("sluicegate_engine_kv_blocks_free", "num_blocks_free", "KV-cache blocks free (cached-but-unused included)."),
    ("sluicegate_engine_step_time_seconds", "last_step_time_s", "Duration of the latest engine step."),
    ("sluicegate_engine_kv_handoffs_held", "kv_handoffs_held", "Prefill handoffs waiting for a decode replica."),
)


class ServerMetrics:
    def __init__(self, model_name: str, initial_stats: EngineStats | None = None):
        """`initial_stats`: the engine's state before its first step (pool size, spec-decode positions), so the
        first scrape already shows them; all zeros when not given."""
        self.registry = CollectorRegistry()
        self.model_name = model_name
        self.stats: EngineStats = initial_stats or EngineStats()  # latest EngineStats, replaced on the event loop
        labels = ["model_name"]
        self.ttft_s = Histogram(
            "vllm:time_to_first_token_seconds", "Time to first token.", labels,
            buckets=_TTFT_BUCKETS_S, registry=self.registry,
        ).labels(model_name)  # fmt: skip
        self.itl_s = Histogram(
            "vllm:inter_token_latency_seconds", "Time between consecutive token outputs of a request.", labels,
            buckets=_ITL_BUCKETS_S, registry=self.registry,
        ).labels(model_name)  # fmt: skip
        self.e2e_s = Histogram(
            "vllm:e2e_request_latency_seconds", "Request latency from arrival to its last token.", labels,
            buckets=_E2E_BUCKETS_S, registry=self.registry,
        ).labels(model_name)  # fmt: skip
        self.queue_s = Histogram(
            "vllm:request_queue_time_seconds", "Time a request waited before its first step.", labels,
            buckets=_E2E_BUCKETS_S, registry=self.registry,
        ).labels(model_name)  # fmt: skip
        self._success = Counter(
            "vllm:request_success", "Finished requests by finish reason.", labels + ["finished_reason"],
            registry=self.registry,
        )  # fmt: skip
        for finish_reason in _FINISH_REASONS:
            self._success.labels(model_name, finish_reason)
        self._rejected = Counter(
            "sluicegate_engine_requests_rejected", "Requests refused before running, by reason.", ["reason"],
            registry=self.registry,
        )  # fmt: skip
        self.aborted = Counter(
            "sluicegate_engine_requests_aborted", "Requests aborted because the client went away.",
            registry=self.registry,
        )  # fmt: skip
        self.registry.register(_EngineStatsCollector(self))

    def request_finished(self, finish_reason: str) -> None:
        self._success.labels(self.model_name, finish_reason).inc()

    def request_rejected(self, reason: str) -> None:
        self._rejected.labels(reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineStatsCollector:
    def __init__(self, metrics: ServerMetrics):
        self._metrics = metrics

    def describe(self):
        return []

    def collect(self):
        stats, model_name = self._metrics.stats, self._metrics.model_name
        for name, field, help_text in _COUNTERS:
            family = CounterMetricFamily(name, help_text, labels=["model_name"])
            family.add_metric([model_name], float(getattr(stats, field, 0)))
            yield family
        for name, field, help_text in _GAUGES:
            family = GaugeMetricFamily(name, help_text, labels=["model_name"])
            family.add_metric([model_name], float(getattr(stats, field, 0)))
            yield family
        if stats.spec_decode is not None:
            yield from spec_decode_metric_families(stats.spec_decode, model_name)
