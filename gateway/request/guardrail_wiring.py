"""Builds the request hooks from the gateway config's `guardrails` section (NoHooks when there is none).

    guardrails:
      engine: {pii_engine: fast}                # guardrails.config.GuardrailsConfig fields
      policies:                                 # tenants name one of these in their `guardrails` field ("off": none)
        strict: {pii_action: redact, output_pii_action: redact, injection_action: block}

guardrails/ is imported only here and only when the section exists, so a gateway without guardrails never loads
Presidio or spaCy.
"""

from __future__ import annotations

from typing import Any, Literal

from prometheus_client import CollectorRegistry

from gateway.errors import guardrail_policy_unknown, invalid_request
from gateway.request.hooks import NoHooks, RequestHooks

GuardrailsSection = dict[Literal["engine", "policies"], dict[str, Any] | None]
"""The gateway config's `guardrails` section (GatewayConfig.guardrails)."""


def build_hooks(section: GuardrailsSection | None, metrics_registry: CollectorRegistry) -> RequestHooks:
    if not section:
        return NoHooks()
    from guardrails import GuardrailPolicy, Guardrails, GuardrailsConfig
    from guardrails.gateway_hooks import GuardrailHooks
    from guardrails.metrics import GuardrailMetrics

    config = GuardrailsConfig.from_dict(section.get("engine"), "guardrails.engine")
    engine = Guardrails(config, GuardrailMetrics(metrics_registry))
    policies = {
        name: GuardrailPolicy.from_dict(raw, f"guardrails.policies.{name}")
        for name, raw in (section.get("policies") or {}).items()
    }
    return GuardrailHooks(
        engine,
        policies,
        on_block=lambda blocked: invalid_request(str(blocked), code="content_policy_violation"),
        on_unknown_policy=guardrail_policy_unknown,
    )
