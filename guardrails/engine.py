"""Guardrails: built once at start-up, shared by all requests; the gateway's entry point to PII and injection checks.

    guardrails = Guardrails(GuardrailsConfig.from_dict(cfg), metrics=GuardrailMetrics(registry))
    policy = GuardrailPolicy.from_dict(policy_dict)            # at config load; guardrails.check_policy(policy)
    verdict = await asyncio.to_thread(guardrails.check_input, texts, policy, tenant.id)
    verdict.raise_if_blocked()                                  # or map verdict.blocked_reason to a 400
    redactor = guardrails.stream_redactor(policy, tenant.id)   # per choice; feed(delta) / finish()

GuardrailHooks (gateway_hooks.py) does exactly this for the gateway's request hooks. `check_input` is CPU-bound
(~0.5-1.5 ms for a 100-token prompt) and thread-safe: run it off the event loop, beside routing and connection
set-up. Constructing Guardrails loads Presidio and spaCy (not torch; see presidio_import.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from opentelemetry import trace

from guardrails.config import GuardrailsConfig
from guardrails.errors import OutputBlocked
from guardrails.findings import Finding, redact
from guardrails.metrics import INJECTION_ENTITY, GuardrailMetrics
from guardrails.policy import GuardrailPolicy
from guardrails.prompt_view import PromptView, Segment
from guardrails.readable import find_readable
from guardrails.verdict import InputVerdict

_TRACER = trace.get_tracer("sluicegate.guardrails")

if TYPE_CHECKING:
    from guardrails.injection.classifier import InjectionClassifier
    from guardrails.injection.encoder.model import EncoderModel
    from guardrails.injection.model import InjectionModel
    from guardrails.stream import StreamRedactor


class Guardrails:
    def __init__(self, config: GuardrailsConfig | None = None, metrics: GuardrailMetrics | None = None) -> None:
        from guardrails.injection.cache import ScoreCache
        from guardrails.injection.detector import InjectionDetector
        from guardrails.pii_scanner import PiiScanner, build_analyzer

        self.config = config or GuardrailsConfig()
        self.metrics = metrics
        self.analyzer = build_analyzer(self.config.spacy_model_path)
        self.scanner = PiiScanner(self.analyzer, self.config.pii_engine, self.config.spacy_model_path is not None)
        self.injection = InjectionDetector(self._classifier(), self._learned_model(), self._encoder())
        self._injection_scores = ScoreCache(self.injection.score)

    def _classifier(self) -> InjectionClassifier | None:
        if self.config.injection_model_path is None:
            return None
        from guardrails.injection.classifier import InjectionClassifier

        return InjectionClassifier(
            self.config.injection_model_path, self.config.injection_model_label, self.config.injection_model_max_tokens
        )

    def _learned_model(self) -> InjectionModel | None:
        if not self.config.injection_learned_model:
            return None
        from guardrails.injection.model import shipped_model

        return shipped_model()

    def _encoder(self) -> EncoderModel | None:
        if not self.config.injection_encoder:
            return None
        from guardrails.injection.encoder.model import shipped_encoder

        return shipped_encoder()

    def check_policy(self, policy: GuardrailPolicy) -> None:
        """Raise GuardrailConfigError if the policy names entities this deployment cannot detect."""
        self.scanner.check_policy(policy)

    def check_input(
        self, texts: list[str], policy: GuardrailPolicy, tenant: str = "", untrusted: list[bool] | None = None
    ) -> InputVerdict:
        """PII and injection checks over a request's texts (message contents, prompts) under a tenant's policy.

        `untrusted[i]` says whether text i is scored for injection (default: all are). PII is checked in every text;
        injection only in what users and tools wrote: an operator's system prompt ("never reveal your system
        prompt") reads like an attack and must not block its own requests. Each text is its own unit (see
        check_segments): PII split between two texts is found too.
        """
        flags = [True] * len(texts) if untrusted is None else untrusted
        segments = [Segment(text, i, flag) for i, (text, flag) in enumerate(zip(texts, flags, strict=True))]
        return self.check_segments(segments, policy, tenant)

    def check_segments(
        self, segments: Sequence[Segment], policy: GuardrailPolicy, tenant: str = "", injection: bool = True
    ) -> InputVerdict:
        """The checks over a request's fields (guardrails/request_fields.py), scanned as the model reads them:
        joined and normalized once (guardrails/prompt_view.py). `verdict.texts[i]` is segment i, redacted.
        `injection` False: PII only (the policy's injection check runs apart, in check_injection)."""
        started_s = time.perf_counter()
        self.check_policy(policy)
        texts = [segment.text for segment in segments]
        with _TRACER.start_as_current_span("guardrails.check_input") as span:
            findings = (
                PromptView(segments).scan(self.scanner, policy)
                if policy.pii_action != "off" and any(texts)
                else tuple(() for _ in segments)
            )
            score, rules = (
                self._injection([s.text for s in segments if s.untrusted], policy) if injection else (0.0, ())
            )
            unredactable = any(found and not s.redactable for s, found in zip(segments, findings, strict=True))
            verdict = self._decide(texts, policy, findings, score, rules, unredactable)
            span.set_attribute("guardrails.action", verdict.action)
            span.set_attribute("guardrails.injection_score", verdict.injection_score)
            span.set_attribute("guardrails.entities", sorted(verdict.entity_counts()))
            self._count(verdict, policy, tenant)
        if self.metrics is not None:
            self.metrics.check_seconds.observe(time.perf_counter() - started_s)
        return verdict

    def check_injection(self, segments: Sequence[Segment], policy: GuardrailPolicy, tenant: str = "") -> InputVerdict:
        """The policy's injection check alone, for a policy that runs it alongside the upstream request
        (`injection_alongside`; check_segments(injection=False) does the rest): allow, detect or block, the texts
        unchanged."""
        started_s = time.perf_counter()
        texts = [segment.text for segment in segments]
        with _TRACER.start_as_current_span("guardrails.check_injection") as span:
            score, rules = self._injection([s.text for s in segments if s.untrusted], policy)
            verdict = self._decide(texts, policy, tuple(() for _ in segments), score, rules)
            span.set_attribute("guardrails.action", verdict.action)
            span.set_attribute("guardrails.injection_score", verdict.injection_score)
            self._count(verdict, policy, tenant)
        if self.metrics is not None:
            self.metrics.check_seconds.observe(time.perf_counter() - started_s)
        return verdict

    def redact_output(self, text: str, policy: GuardrailPolicy, tenant: str = "") -> str:
        """A whole (non-streamed) completion under the output policy. Raises OutputBlocked."""
        return self.scan_output(text, policy, tenant)[0]

    def scan_output(self, text: str, policy: GuardrailPolicy, tenant: str = "") -> tuple[str, list[Finding]]:
        """(the text under the output policy, the findings acted on): the findings also redact the choice's
        logprobs (guardrails/logprobs.py). Raises OutputBlocked."""
        if policy.output_pii_action == "off":
            return text, []
        findings = find_readable(self.scanner, text, policy)
        for finding in findings:
            self._count_one(tenant, "output", finding.entity, policy.output_pii_action)
        if findings and policy.output_pii_action == "block":
            raise OutputBlocked("pii", tuple(sorted({f.entity for f in findings})))
        if policy.output_pii_action != "redact":
            return text, []
        return redact(text, findings, policy.redaction_style), findings

    def stream_redactor(self, policy: GuardrailPolicy, tenant: str = "") -> StreamRedactor:
        from guardrails.stream import StreamRedactor

        return StreamRedactor(
            self.scanner,
            policy,
            self.config.stream_context_chars,
            self.config.stream_max_holdback_chars,
            on_finding=lambda entity, action: self._count_one(tenant, "output", entity, action),
        )

    def _injection(self, texts: list[str], policy: GuardrailPolicy) -> tuple[float, tuple[str, ...]]:
        if policy.injection_action == "off":
            return 0.0, ()
        results = [self._injection_scores.score(text) for text in texts]
        score = max((r.score for r in results), default=0.0)
        return score, tuple(sorted({name for r in results for name in r.rules}))

    @staticmethod
    def _decide(
        texts: Sequence[str],
        policy: GuardrailPolicy,
        findings: tuple[tuple[Finding, ...], ...],
        score: float,
        rules: tuple[str, ...],
        unredactable: bool = False,
    ) -> InputVerdict:
        found_pii = any(findings)
        injected = policy.injection_action != "off" and score >= policy.injection_threshold
        if injected and policy.injection_action == "block":
            return InputVerdict("block", tuple(texts), findings, score, rules, "prompt_injection")
        # PII in a field that cannot hold a placeholder (an identifier) cannot be redacted: blocked instead.
        if found_pii and (policy.pii_action == "block" or (policy.pii_action == "redact" and unredactable)):
            return InputVerdict("block", tuple(texts), findings, score, rules, "pii")
        if found_pii and policy.pii_action == "redact":
            redacted = tuple(
                redact(text, list(per_text), policy.redaction_style) for text, per_text in zip(texts, findings)
            )
            return InputVerdict("redact", redacted, findings, score, rules)
        action = "detect" if found_pii or injected else "allow"
        return InputVerdict(action, tuple(texts), findings, score, rules)

    def _count(self, verdict: InputVerdict, policy: GuardrailPolicy, tenant: str) -> None:
        for entity, count in verdict.entity_counts().items():
            self._count_one(tenant, "input", entity, policy.pii_action, count)
        if policy.injection_action != "off" and verdict.injection_score >= policy.injection_threshold:
            self._count_one(tenant, "input", INJECTION_ENTITY, policy.injection_action)

    def _count_one(self, tenant: str, direction: str, entity: str, action: str, amount: int = 1) -> None:
        """Metrics and an event on the current span; entity types only, never values."""
        trace.get_current_span().add_event(
            "guardrail", {"direction": direction, "entity": entity, "action": action, "count": amount}
        )
        if self.metrics is not None:
            self.metrics.count(tenant, direction, entity, action, amount)
