"""KV transfer metrics: vLLM's NIXL connector names where vLLM has them, `sluicegate_engine_kv_*` for the rest."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from engine.kv_transfer.planner import PullRefusal

_XFER_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_BYTES_BUCKETS = tuple(float(2**k) for k in range(12, 34, 2))  # 4 KiB .. 8 GiB
_DESCRIPTOR_BUCKETS = tuple(float(2**k) for k in range(0, 20, 2))
FALLBACK_REASONS = ("metadata", "incompatible", "transfer", "timeout", *(r.value for r in PullRefusal))


class KVTransferMetrics:
    def __init__(self, registry: CollectorRegistry, model_name: str) -> None:
        labels = ["model_name"]
        self.xfer_time_s = Histogram(
            "vllm:nixl_xfer_time_seconds", "Time of one KV read, from posting it to its completion.", labels,
            buckets=_XFER_BUCKETS_S, registry=registry,
        ).labels(model_name)  # fmt: skip
        self.bytes_transferred = Histogram(
            "vllm:nixl_bytes_transferred", "Bytes of one KV read.", labels, buckets=_BYTES_BUCKETS, registry=registry
        ).labels(model_name)
        self.num_descriptors = Histogram(
            "vllm:nixl_num_descriptors", "Descriptors (one per layer, key or value, and block) of one KV read.",
            labels, buckets=_DESCRIPTOR_BUCKETS, registry=registry,
        ).labels(model_name)  # fmt: skip
        self.failed_transfers = Counter(
            "vllm:nixl_num_failed_transfers", "KV reads that failed or timed out.", labels, registry=registry
        ).labels(model_name)
        self.blocks_read = Counter(
            "sluicegate_engine_kv_blocks_read", "KV blocks read from prefill replicas.", labels, registry=registry
        ).labels(model_name)
        self.blocks_cached = Counter(
            "sluicegate_engine_kv_blocks_already_cached",
            "Handed-off KV blocks not read because this replica's prefix cache held them.", labels, registry=registry,
        ).labels(model_name)  # fmt: skip
        self._fallbacks = Counter(
            "sluicegate_engine_kv_pull_fallbacks",
            "Decode requests that computed their prompt here instead of reading it, by reason.",
            labels + ["reason"], registry=registry,
        )  # fmt: skip
        for reason in FALLBACK_REASONS:
            self._fallbacks.labels(model_name, reason)
        self.handoffs = Counter(
            "sluicegate_engine_kv_handoffs", "Prefills whose blocks were held for a decode replica.", labels,
            registry=registry,
        ).labels(model_name)  # fmt: skip
        self.model_name = model_name

    def fallback(self, reason: str) -> None:
        self._fallbacks.labels(self.model_name, reason).inc()
