"""Routing metrics (`sluicegate_routing_*`), registered on the registry the gateway passes in.

Prefix hit rate per model = matched_prefix_tokens_total / prompt_tokens_total. The score parts of each decision
(tokens the chosen replica saves, its load in tokens) are histograms, so a dashboard shows whether affinity or load
is deciding.
"""

from __future__ import annotations

from typing import TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

Metric = TypeVar("Metric", bound=MetricWrapperBase)
_TOKEN_BUCKETS = (0, 16, 64, 256, 1024, 4096, 16384, 65536, 262144)


class RoutingMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self._children: dict[tuple[int, tuple[str, ...]], MetricWrapperBase] = {}
        self.decisions = Counter(
            "sluicegate_routing_decisions",
            "Requests routed, by chosen replica, policy and what decided (prefix, load, hash, rotation).",
            ["model", "replica", "policy", "reason"],
            registry=registry,
        )
        self.prompt_tokens = Counter(
            "sluicegate_routing_prompt_tokens", "Prompt tokens of routed requests.", ["model"], registry=registry
        )
        self.matched_prefix_tokens = Counter(
            "sluicegate_routing_matched_prefix_tokens",
            "Prompt tokens the chosen replica was believed to hold in its prefix cache.",
            ["model", "replica"],
            registry=registry,
        )
        self.score_saved_tokens = Histogram(
            "sluicegate_routing_score_saved_tokens",
            "Score part: prefill tokens the chosen replica saves.",
            ["model"],
            buckets=_TOKEN_BUCKETS,
            registry=registry,
        )
        self.score_load_tokens = Histogram(
            "sluicegate_routing_score_load_tokens",
            "Score part: the chosen replica's load in prefill-equivalent tokens.",
            ["model"],
            buckets=_TOKEN_BUCKETS,
            registry=registry,
        )
        self.no_replica = Counter(
            "sluicegate_routing_no_healthy_replica",
            "Requests refused because no replica could take them.",
            ["model"],
            registry=registry,
        )
        self.outcomes = Counter(
            "sluicegate_routing_outcomes",
            "Released requests by outcome.",
            ["model", "replica", "outcome"],
            registry=registry,
        )
        self.inflight = Gauge(
            "sluicegate_routing_inflight_requests",
            "Requests in flight per replica.",
            ["model", "replica"],
            registry=registry,
            multiprocess_mode="livesum",  # --workers N: every worker routes its own share
        )
        self.healthy = Gauge(
            "sluicegate_routing_replica_healthy",
            "1 when the replica may take requests (healthy, breaker not open, active).",
            ["model", "replica"],
            registry=registry,
            multiprocess_mode="livemin",  # --workers N: 1 only while every worker would send it requests
        )
        self.kv_events = Counter(
            "sluicegate_routing_kv_events",
            "KV events applied, by type.",
            ["model", "replica", "type"],
            registry=registry,
        )
        self.kv_resyncs = Counter(
            "sluicegate_routing_kv_resyncs",
            "KV feed reconnections (gap, bad event, lost connection).",
            ["model", "replica", "reason"],
            registry=registry,
        )

    def child(self, metric: Metric, *labels: str) -> Metric:
        """metric.labels(*labels), cached: prometheus_client's lookup takes a lock and costs microseconds."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return cast(Metric, found)

    def forget_replica(self, model: str, replica: str) -> None:
        """Drop a removed replica's labelled series so the metrics do not grow with every replica ever seen."""
        # Every labelled series is made through `child`, so its cache names them all (no reach into the library).
        by_id = {id(m): m for m in self._replica_metrics()}
        gone = [key for key in self._children if key[1][:2] == (model, replica)]
        for metric_id, labels in gone:
            del self._children[(metric_id, labels)]
            if metric_id in by_id:
                by_id[metric_id].remove(*labels)

    def _replica_metrics(self) -> tuple[MetricWrapperBase, ...]:
        """The metrics labelled by (model, replica, ...)."""
        return (
            self.decisions,
            self.matched_prefix_tokens,
            self.outcomes,
            self.kv_events,
            self.kv_resyncs,
            self.inflight,
            self.healthy,
        )
