"""Baselines for the routing benchmark that are not product policies, each at its project's defaults. (SGLang's
router rule is one the gateway can run too, for end-to-end comparisons: gateway/routing/policies/sglang_cache_aware.py;
the simulation feeds it `matched_blocks` and `indexed_blocks` from a HistoryIndex, its approximate tree.)

`LlmdPrecisePolicy`: llm-d's inference scheduler with its precise prefix-cache scorer (fed by the replicas' KV
events), the queue scorer and the KV-cache-utilisation scorer, summed with the weights of llm-d's
precise-prefix-cache-aware guide (3, 2, 2), the max-score picker breaking ties at random. Scores, each in [0, 1]:
prefix = matched blocks / the best match among replicas (0 when none matches), queue = (max - q) / (max - min)
waiting requests (1 when all equal), KV = 1 - KV usage.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from gateway.routing.policies.base import Candidate, Choice, PolicyRequest


class LlmdPrecisePolicy:
    name = "llmd_precise"

    def __init__(
        self, prefix_weight: float = 3.0, queue_weight: float = 2.0, kv_weight: float = 2.0, seed: int = 0
    ) -> None:
        self.prefix_weight = prefix_weight
        self.queue_weight = queue_weight
        self.kv_weight = kv_weight
        self._random = random.Random(seed)

    def choose(self, request: PolicyRequest, candidates: Sequence[Candidate]) -> Choice:
        best_match = max(c.matched_blocks for c in candidates)
        queues = [c.load.waiting_requests for c in candidates]
        low, high = min(queues), max(queues)
        scores = []
        for candidate, queue in zip(candidates, queues):
            prefix = candidate.matched_blocks / best_match if best_match else 0.0
            queue_score = 1.0 if high == low else (high - queue) / (high - low)
            kv = 1.0 - candidate.load.kv_usage
            scores.append(self.prefix_weight * prefix + self.queue_weight * queue_score + self.kv_weight * kv)
        top = max(scores)
        index = self._random.choice([i for i, score in enumerate(scores) if score == top])
        saved = min(candidates[index].matched_blocks * request.block_size, request.prompt_tokens)
        return Choice(index=index, reason="prefix" if saved else "load", saved_tokens=saved)


class LeastQueuedPrefillPolicy:
    """Least loaded by the prefill work queued on each replica (uncached prompt tokens before their first token);
    the cache plays no part. Ties rotate."""

    name = "least_loaded"

    def __init__(self) -> None:
        self._turn = 0

    def choose(self, request: PolicyRequest, candidates: Sequence[Candidate]) -> Choice:
        self._turn += 1
        n = len(candidates)
        index = min(range(n), key=lambda i: (candidates[i].load.queued_prefill_tokens, (i - self._turn) % n))
        return Choice(index=index, reason="load")
