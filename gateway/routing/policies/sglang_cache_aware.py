"""SGLang's router rule (sgl-router, `cache_aware`), for comparing against its users' default on real traffic.

When the pool is imbalanced, i.e. (max - min) in-flight requests > balance_abs_threshold AND max >
balance_rel_threshold * min, the request goes to the replica with the fewest in flight. Otherwise, if its best prefix
match covers more than cache_threshold of the prompt, to that replica; otherwise to the replica whose index holds the
fewest blocks (the most free cache, as the router sees it). Defaults are its launcher's: cache_threshold 0.5,
balance_abs_threshold 32, balance_rel_threshold 1.0001.

SGLang's router matches against an approximate radix tree of what it routed where, not what replicas hold: a
gateway whose replicas have `kv_events: false` gives this policy exactly that (the history index); with KV events it
matches against the replicas' own caches, which is more than SGLang's router knows.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.routing.policies.base import Candidate, Choice, PolicyRequest, saved_tokens


class SglangCacheAwarePolicy:
    name = "sglang_cache_aware"

    def __init__(
        self, cache_threshold: float = 0.5, balance_abs_threshold: int = 32, balance_rel_threshold: float = 1.0001
    ) -> None:
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold

    def choose(self, request: PolicyRequest, candidates: Sequence[Candidate]) -> Choice:
        loads = [c.load.inflight_requests for c in candidates]
        least_loaded = min(range(len(candidates)), key=loads.__getitem__)
        most, fewest = max(loads), min(loads)
        if most - fewest > self.balance_abs_threshold and most > self.balance_rel_threshold * fewest:
            return Choice(index=least_loaded, reason="load")
        best = max(range(len(candidates)), key=lambda i: candidates[i].matched_blocks)
        saved = saved_tokens(request, candidates[best])
        if request.prompt_tokens and saved / request.prompt_tokens > self.cache_threshold:
            return Choice(index=best, reason="prefix", saved_tokens=saved)
        smallest_index = min(range(len(candidates)), key=lambda i: candidates[i].indexed_blocks)
        return Choice(index=smallest_index, reason="load")
