"""Round robin: each request to the next candidate in turn; ignores load and cache."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.routing.policies.base import Candidate, Choice, PolicyRequest


class RoundRobinPolicy:
    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def choose(self, request: PolicyRequest, candidates: Sequence[Candidate]) -> Choice:
        index = self._next % len(candidates)
        self._next += 1
        return Choice(index=index, reason="rotation")
