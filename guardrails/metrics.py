"""Prometheus metrics for guardrail actions. Labels carry entity types and rule outcomes, never matched values."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

INJECTION_ENTITY = "prompt_injection"


class GuardrailMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.actions = Counter(
            "sluicegate_guardrail_findings",
            "Guardrail findings acted on, by tenant, direction, entity and action",
            ["tenant", "direction", "entity", "action"],
            registry=registry,
        )
        self.request_actions = Counter(
            "sluicegate_guardrail_actions",
            "Requests a guardrail acted on, by action (input_detect, input_redact, input_block, output_redact, "
            "output_block); a request counts once per action, however many findings",
            ["action"],
            registry=registry,
        )
        self.check_seconds = Histogram(
            "sluicegate_guardrail_check_seconds",
            "CPU time of one input guardrail check (PII and injection; two checks when injection runs alongside)",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
            registry=registry,
        )

    def count(self, tenant: str, direction: str, entity: str, action: str, amount: int = 1) -> None:
        self.actions.labels(tenant=tenant, direction=direction, entity=entity, action=action).inc(amount)

    def count_request(self, action: str) -> None:
        """One request a guardrail acted on (the Grafana dashboard's "Guardrail actions" panel)."""
        self.request_actions.labels(action=action).inc()
