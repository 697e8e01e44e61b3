"""Guardrail errors.

ValueError
 └── GuardrailConfigError   bad GuardrailsConfig or tenant policy: fix the config (message names value and fix)
Exception
 └── GuardrailBlocked       a policy said `block`; the gateway turns it into an OpenAI error (never logs values)
      └── OutputBlocked     raised by StreamRedactor.feed/finish when the output policy blocks mid-stream
"""

from __future__ import annotations


class GuardrailConfigError(ValueError):
    """A guardrail config or tenant policy value is invalid; raised once, at load time."""


class GuardrailBlocked(Exception):
    """A request or response was blocked by policy. `reason` is "pii" or "prompt_injection"; `entities` are
    entity type names only (never the matched values), safe to put in an error message or a log line."""

    MESSAGE = "blocked by guardrail policy"

    def __init__(self, reason: str, entities: tuple[str, ...] = ()) -> None:
        self.reason = reason
        self.entities = entities
        detail = f" ({', '.join(entities)})" if entities else ""
        super().__init__(f"{self.MESSAGE}: {reason}{detail}")


class OutputBlocked(GuardrailBlocked):
    """The output (streamed or whole) contained an entity the tenant's output policy blocks."""

    # Not the input's wording: the client's prompt was fine, the model's answer was not (and it is charged).
    MESSAGE = "the response was blocked by the tenant's output guardrail policy"
