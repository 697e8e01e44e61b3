"""The gateway's Prometheus metrics (`sluicegate_*`; the router adds its routing metrics to the same registry),
one registry per app so that several gateways can share a process (tests). Children with fixed labels are cached:
`labels()` costs microseconds on the hot path.

With `--workers N` the CLI points PROMETHEUS_MULTIPROC_DIR at a directory of its own before the workers start:
every worker then keeps its values in files there, and /metrics, whichever worker answers it, reports all of
them (counters and histograms summed; each gauge as its `multiprocess_mode` says).
"""

from __future__ import annotations

import glob
import os
from typing import TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.metrics import MetricWrapperBase

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

Metric = TypeVar("Metric", bound=MetricWrapperBase)

_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "sluicegate_requests",
            "Requests answered, by tenant, model and HTTP status",
            ["tenant", "model", "status"],
            registry=r,
        )
        self.tokens = Counter(
            "sluicegate_tokens",
            "Tokens settled, by tenant and direction (input/output)",
            ["tenant", "direction"],
            registry=r,
        )
        self.ttft = Histogram(
            "sluicegate_time_to_first_chunk_seconds",
            "Request arrival to first body byte sent",
            ["model"],
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.inter_chunk = Histogram(
            "sluicegate_inter_chunk_seconds",
            "Gap between streamed chunks sent",
            ["model"],
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.rejections = Counter(
            "sluicegate_ratelimit_rejections", "Requests refused by limits, by reason", ["tenant", "reason"], registry=r
        )
        self.upstream_errors = Counter("sluicegate_upstream_errors", "Upstream failures by kind", ["kind"], registry=r)
        self.redis_fallbacks = Counter(
            "sluicegate_redis_fallbacks",
            "Store calls answered without Redis, by mode (fail_open/fail_closed)",
            ["mode", "op"],
            registry=r,
        )
        self.settle_pending = Gauge(
            "sluicegate_settlements_pending",
            "Settlements waiting for Redis to return",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.tokenize_seconds = Histogram(
            "sluicegate_tokenize_seconds",
            "Prompt tokenization time",
            ["model"],
            buckets=(5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2, 0.1),
            registry=r,
        )
        self.overlapped = Counter(
            "sluicegate_admissions_overlapped",
            "Requests sent upstream while their admission script ran (gateway/request/overlap.py)",
            registry=r,
        )
        self.overlap_refusals = Counter(
            "sluicegate_admissions_overlap_refused",
            "Overlapped requests the script refused after all: cancelled upstream",
            registry=r,
        )
        self.prefill_hops = Counter(
            "sluicegate_prefill_hops",
            "Prefill hops of disaggregated models (gateway/request/prefill.py), by outcome (ok; fallback: the decode "
            "replica prefilled itself; skipped: n > 1 or a short prompt; retried: a first prefill replica failed "
            "before answering and the hop went on to another, counted again under its final outcome) and reason",
            ["model", "outcome", "reason"],
            registry=r,
        )
        self.prefill_seconds = Histogram(
            "sluicegate_prefill_hop_seconds",
            "Prefill hop sent to the prefill replica's answer or failure: what the hop adds before the decode hop",
            ["model"],
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
        self._redis_up: Gauge | None = None
        self._children: dict[tuple[int, tuple[str, ...]], MetricWrapperBase] = {}

    def redis_up(self, up: bool) -> None:
        """`sluicegate_redis_up`: 1 while Redis answers, 0 while it does not. The gauge is made on the first call
        (the Redis-backed store makes it at start), so a gateway without Redis has no such series rather than a 0
        that reads as an outage."""
        if self._redis_up is None:
            self._redis_up = Gauge(
                "sluicegate_redis_up",
                "1 while the gateway believes Redis is reachable, 0 while not; absent without Redis",
                registry=self.registry,
                multiprocess_mode="livemin",
            )
        self._redis_up.set(1 if up else 0)

    def child(self, metric: Metric, *labels: str) -> Metric:
        """`metric.labels(*labels)`, made once per label set."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return cast(Metric, child)

    def render(self) -> bytes:
        directory = os.environ.get(MULTIPROC_DIR_ENV)
        if directory:
            _forget_dead_workers(directory)
            workers = CollectorRegistry()
            multiprocess.MultiProcessCollector(workers)
            return generate_latest(workers)
        return generate_latest(self.registry)

    def close(self) -> None:
        """A worker that stops takes its live gauges out of the shared directory."""
        if os.environ.get(MULTIPROC_DIR_ENV):
            multiprocess.mark_process_dead(os.getpid())


def _forget_dead_workers(directory: str) -> None:
    """uvicorn replaces a worker that crashed or hung, and that worker never ran `close`: drop its live gauges
    (gauge_live<mode>_<pid>.db) or its in-flight count and its Redis verdict would stay in the totals."""
    for path in glob.glob(os.path.join(directory, "gauge_live*_*.db")):
        pid = int(path.rsplit("_", 1)[1][:-3])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid, directory)
        except PermissionError:  # alive, someone else's
            pass
