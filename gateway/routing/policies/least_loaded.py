"""Least loaded: the candidate with the fewest in-flight requests, then the fewest in-flight prompt tokens.

Ties rotate, so an idle pool still spreads requests instead of piling them on the first replica.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.routing.policies.base import Candidate, Choice, PolicyRequest


class LeastLoadedPolicy:
    name = "least_loaded"

    def __init__(self) -> None:
        self._turn = 0

    def choose(self, request: PolicyRequest, candidates: Sequence[Candidate]) -> Choice:
        self._turn += 1
        n = len(candidates)

        def key(i: int) -> tuple[int, int, int]:
            load = candidates[i].load
            return load.inflight_requests, load.inflight_prompt_tokens, (i - self._turn) % n

        return Choice(index=min(range(n), key=key), reason="load")
