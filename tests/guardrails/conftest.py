"""Guardrails built once per test session (each builds a Presidio analyzer, ~0.3 s)."""

from __future__ import annotations

import pytest

from guardrails import GuardrailMetrics, Guardrails, GuardrailsConfig


@pytest.fixture(scope="session")
def guardrails_engine() -> Guardrails:
    return Guardrails(GuardrailsConfig())


@pytest.fixture(scope="session")
def presidio_engine(guardrails_engine) -> Guardrails:
    """The full AnalyzerEngine path, for comparing with the fast path."""
    return Guardrails(GuardrailsConfig(pii_engine="presidio"))


@pytest.fixture
def metered(guardrails_engine):
    """The shared engine with fresh metrics in a private registry, restored afterwards."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    saved = guardrails_engine.metrics
    guardrails_engine.metrics = GuardrailMetrics(registry)
    yield guardrails_engine, registry
    guardrails_engine.metrics = saved
