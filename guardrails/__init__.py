"""Guardrails: offline PII detection/redaction (Presidio), prompt-injection scoring, streaming output redaction.

The gateway's API (see engine.py for the call sequence):

- `GuardrailsConfig.from_dict(d)`: process-wide settings (PII engine, optional spaCy NER model path, optional
  injection classifier path, stream window sizes), validated once.
- `GuardrailPolicy.from_dict(d)`: a tenant's policy (entities, thresholds, input/output PII action, redaction style,
  injection action and threshold); unknown keys and bad values raise GuardrailConfigError.
- `Guardrails(config, metrics)`: built once; `check_policy(policy)`, `check_input(texts, policy, tenant) ->
  InputVerdict`, `check_segments(segments, policy, tenant)` (a request's fields, scanned joined and normalized as
  the model reads them: prompt_view.py, request_fields.py), `redact_output(text, policy, tenant)`,
  `scan_output(...)` (text and findings, for logprobs.py), `stream_redactor(policy, tenant) -> StreamRedactor`.
- `StreamRedactor.feed(delta) -> str`, `.finish() -> str`, `.blocked`; both raise OutputBlocked on output `block`.
- `GuardrailHooks(guardrails, policies, on_block)`: gateway/request/hooks.py's RequestHooks over all of the above
  (request bodies, non-streamed bodies, SSE streams); see gateway_hooks.py for the wiring.
- `GuardrailMetrics(registry)`: `sluicegate_guardrail_findings_total{tenant,direction,entity,action}` (findings),
  `sluicegate_guardrail_actions_total{action}` (requests acted on, once per action) and
  `sluicegate_guardrail_check_seconds`.

Importing this package is cheap. Constructing Guardrails loads Presidio and spaCy, still without torch or
transformers (see presidio_import.py); torch loads only when an injection classifier is configured.
"""

from guardrails.config import GuardrailsConfig
from guardrails.engine import Guardrails
from guardrails.errors import GuardrailBlocked, GuardrailConfigError, OutputBlocked
from guardrails.findings import Finding
from guardrails.gateway_hooks import GuardrailHooks
from guardrails.metrics import GuardrailMetrics
from guardrails.policy import DEFAULT_PII_ENTITIES, GuardrailPolicy
from guardrails.verdict import InputVerdict

__all__ = [
    "DEFAULT_PII_ENTITIES",
    "Finding",
    "GuardrailBlocked",
    "GuardrailConfigError",
    "GuardrailHooks",
    "GuardrailMetrics",
    "GuardrailPolicy",
    "Guardrails",
    "GuardrailsConfig",
    "InputVerdict",
    "OutputBlocked",
]
