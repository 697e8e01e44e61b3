"""Prefix-affinity routing: the replica that saves the most prefill work, net of its load, within a load bound.

Algorithm
---------
Inputs per request: the chain hashes of the prompt's full blocks (block i's hash names blocks 0..i, see
sluicegate/block_hash.py) and the prompt and output sizes. Inputs per candidate replica (healthy, breaker not
open, not draining): `matched_blocks` from the prefix index and its load.

1. Load bound. cap = ceil(max_load_ratio * (total in-flight + 1) / n) + max_load_slack_requests. A replica
   whose in-flight count would exceed cap is not a candidate for this request (consistent hashing with
   bounded loads). However hot one prefix is, no replica carries much more than max_load_ratio times the
   mean, and the least loaded replica always qualifies. This is what keeps prefix affinity from collapsing
   onto one replica, the failure llm-d reports for prefix-only scoring. The slack matters at low load: with
   4 replicas and 4 requests in flight the bare bound is 2, and enforcing it scatters conversations whose
   cache is on a replica with 3 (in the Mooncake replay, slack 0 costs 4-10 points of hit rate).

2. Score, in prompt tokens, for each remaining candidate r:

       saved(r) = min(matched_blocks(r) * block_size, prompt_tokens)
       load(r)  = inflight_prompt_tokens(r)                             prefill work queued ahead of us
                + decode_token_weight    * inflight_decode_tokens(r)   decodes share steps with our prefill
                + waiting_request_tokens * num_requests_waiting(r)     the replica's own queue (scraped)
                + kv_usage_tokens        * kv_cache_usage_perc(r)      near-full caches preempt and evict
       score(r) = saved(r) - load_weight * load(r)

   saved(r) is prefill this request skips on r; load(r) estimates prefill-equivalent work it waits behind.
   Both are tokens, so the score approximates "time to first token, negated" and a long warm prefix wins
   when it is worth more than the extra queue it sits behind. The router only knows a request is in flight,
   not whether its prefill is done, so inflight_prompt_tokens counts prompts still decoding too; that is why
   load_weight is well below 1 (in the replay, about 1/10 of a request's residence is prefill).

3. Pick the highest score; ties go to the fewest in-flight requests, then rotate so an idle pool spreads.
   reason = "prefix" when the winner's saved(r) > 0, else "load" (the choice was by load alone).

Hit rate and TTFT pull apart: weighting load more (load_weight, waiting_request_tokens) lowers TTFT and the
hit rate. The defaults were chosen on the Mooncake replay (`sluicegate bench routing`) for hit rate within the
load bound; charging each waiting request the replica's mean in-flight prompt instead cut mean TTFT there by
5-15% at a cost of 1-5 points of hit rate.

The index behind matched_blocks is precise (the replica's KV events feed) or approximate (the router's own
history, with a TTL) per replica; the policy does not care which. Each tenant hashes with its own salt (or its
cache group's), so its blocks only ever match its own (its group's) requests.

Knobs (PolicyConfig)
--------------------
max_load_ratio          load bound on in-flight requests vs the mean (>= 1.0; 1.25 default). Lower: better
                        balance, fewer hits.
max_load_slack_requests requests a replica may exceed the ratio bound by (8). 0 with ratio 1.0: strict balance.
load_weight             prompt tokens given up per load token (0.02). 0 makes the policy cache-only within
                        the bound; 1 and above make it nearly least-loaded-by-tokens.
decode_token_weight     load tokens per in-flight output token (0.1).
waiting_request_tokens  load tokens per request in the replica's own waiting queue (512).
kv_usage_tokens         load tokens at 100% KV usage (2048).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.routing.policies.base import (
    Candidate,
    Choice,
    PolicyRequest,
    saved_tokens,
    weighted_load_tokens,
    within_cap,
)


class PrefixAffinityPolicy:
    name = "prefix_affinity"

    def __init__(
        self,
        max_load_ratio: float = 1.25,
        max_load_slack_requests: int = 8,
        load_weight: float = 0.02,
        decode_token_weight: float = 0.1,
        waiting_request_tokens: float = 512.0,
        kv_usage_tokens: float = 2048.0,
    ) -> None:
        self.max_load_ratio = max_load_ratio
        self.max_load_slack_requests = max_load_slack_requests
        self.load_weight = load_weight
        self.decode_token_weight = decode_token_weight
        self.waiting_request_tokens = waiting_request_tokens
        self.kv_usage_tokens = kv_usage_tokens
        self._turn = 0

    def choose(self, request: PolicyRequest, candidates: Sequence[Candidate]) -> Choice:
        self._turn += 1
        n = len(candidates)
        best: tuple[tuple[float, int, int], int, int, float] | None = None
        for i in within_cap(candidates, self.max_load_ratio, self.max_load_slack_requests):
            saved = saved_tokens(request, candidates[i])
            load = self.load_tokens(candidates[i])
            rank = (saved - self.load_weight * load, -candidates[i].load.inflight_requests, -((i - self._turn) % n))
            if best is None or rank > best[0]:
                best = (rank, i, saved, load)
        assert best is not None  # within_cap yields at least one candidate
        _, index, saved, load = best
        return Choice(index=index, reason="prefix" if saved > 0 else "load", saved_tokens=saved, load_tokens=load)

    def load_tokens(self, candidate: Candidate) -> float:
        return weighted_load_tokens(
            candidate.load, self.decode_token_weight, self.waiting_request_tokens, self.kv_usage_tokens
        )
