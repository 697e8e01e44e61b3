"""The decode hop's policy (docs/architecture.md, "Disaggregated prefill and decode"): the replica whose memory and
batch the request weighs on least, a warm prefix counting for what it spares.

    cost(r) = kv_tokens(r) + waiting_request_tokens * num_requests_waiting(r) + kv_usage_tokens * kv_cache_usage_perc(r)
              - saved(r)

    kv_tokens(r)  prompt and output tokens of the requests routed to r and not yet released: KV held or to come
    saved(r)      min(matched_blocks(r) * block_size, prompt_tokens): blocks r holds already (pulled for an earlier
                  request and registered in its prefix cache), so it neither pulls nor allocates them again

A decode replica computes next to no prefill (it pulls the prompt's KV), so a prefill queue is no measure of it: what
a request waits on there is the batch it joins and the free KV it needs (a replica that runs short preempts). The
scraped terms are the replica's own view, which also counts other gateways' requests. Ties (an idle pool) go to the
fewest in-flight requests, then rotate. The knobs are PolicyConfig's `waiting_request_tokens` and `kv_usage_tokens`.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.routing.policies.base import Candidate, Choice, PolicyRequest, saved_tokens, weighted_load_tokens


class DecodeLoadPolicy:
    name = "decode_load"

    def __init__(self, waiting_request_tokens: float = 512.0, kv_usage_tokens: float = 2048.0) -> None:
        self.waiting_request_tokens = waiting_request_tokens
        self.kv_usage_tokens = kv_usage_tokens
        self._turn = 0

    def choose(self, request: PolicyRequest, candidates: Sequence[Candidate]) -> Choice:
        self._turn += 1
        n = len(candidates)

        def rank(i: int) -> tuple[float, int, int]:
            candidate = candidates[i]
            cost = self.load_tokens(candidate) - saved_tokens(request, candidate)
            return cost, candidate.load.inflight_requests, (i - self._turn) % n

        index = min(range(n), key=rank)
        saved = saved_tokens(request, candidates[index])
        load = self.load_tokens(candidates[index])
        return Choice(index=index, reason="prefix" if saved > 0 else "load", saved_tokens=saved, load_tokens=load)

    def load_tokens(self, candidate: Candidate) -> float:
        # A decode token weighs as much as a prompt token here: both are KV the replica holds.
        return weighted_load_tokens(candidate.load, 1.0, self.waiting_request_tokens, self.kv_usage_tokens)
