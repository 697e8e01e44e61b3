"""Reading an upstream's `usage` object: counts the store can take, or None where the upstream's is missing or not
a count. Settlement charges by them; the prefill hop reads its replica's cached tokens with them too."""

from __future__ import annotations

from typing import Any

MAX_USAGE_TOKENS = 2**31 - 1
"""An upstream's usage is clamped here: no request uses more, and Redis' counters must stay integers."""


def usage_tokens(value: object) -> int | None:
    """A usage count as the store can take it; None when the upstream's is missing or not a count."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return None
    return min(value, MAX_USAGE_TOKENS)


def cached_tokens(usage: object) -> int:
    """usage.prompt_tokens_details.cached_tokens (prompt tokens served from the replica's prefix cache), else 0."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    cached = usage_tokens(details.get("cached_tokens")) if isinstance(details, dict) else None
    return cached or 0


def completion_count(usage: dict[str, Any] | None) -> int | None:
    """The usage's completion token count, None when it has no usable one (the answer is then counted by text)."""
    return usage_tokens((usage or {}).get("completion_tokens"))
