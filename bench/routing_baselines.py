"""Baselines for the routing benchmark that are not product policies.

`SglangStylePolicy` re-implements the decision rule of SGLang's router (sgl-router `cache_aware` policy, defaults
of its current Python launcher): when the pool is imbalanced, i.e. (max - min) in-flight > balance_abs_threshold AND
max > balance_rel_threshold * min, route to the least loaded replica; otherwise, if the best prefix match covers more
than cache_threshold of the prompt, route to that replica; otherwise to the replica with the smallest approximate
tree (the most free cache). Its tree is approximate (where it routed, not what replicas hold): the benchmark feeds
it `matched_blocks` and `indexed_blocks` from a HistoryIndex.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.routing.policies.base import Candidate, Choice, PolicyRequest


class SglangStylePolicy:
    name = "sglang_style"

    def __init__(
        self, cache_threshold: float = 0.3, balance_abs_threshold: int = 64, balance_rel_threshold: float = 1.5
    ) -> None:
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold

    def choose(self, request: PolicyRequest, candidates: Sequence[Candidate]) -> Choice:
        loads = [c.load.inflight_requests for c in candidates]
        least_loaded = min(range(len(candidates)), key=loads.__getitem__)
        spread = max(loads) - min(loads)
        imbalanced = spread > self.balance_abs_threshold and max(loads) > self.balance_rel_threshold * min(loads)
        if imbalanced:
            return Choice(index=least_loaded, reason="load")
        best = max(range(len(candidates)), key=lambda i: candidates[i].matched_blocks)
        saved = min(candidates[best].matched_blocks * request.block_size, request.prompt_tokens)
        if request.prompt_tokens and saved / request.prompt_tokens > self.cache_threshold:
            return Choice(index=best, reason="prefix", saved_tokens=saved)
        smallest_tree = min(range(len(candidates)), key=lambda i: candidates[i].indexed_blocks)
        return Choice(index=smallest_tree, reason="load")
