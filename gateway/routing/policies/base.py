"""The policy interface: one pure function of plain data, shared by the live router and the simulation benchmark.

A policy sees the request's prefix (block hashes, prompt and output size) and one `Candidate` per replica that may
take it (healthy, breaker closed, not draining, not excluded), each with its load and how many leading blocks of
the prompt the prefix index believes it holds. It returns a `Choice`. Policies keep no per-request state and do
no I/O, so the router can call them inline on the request path and the benchmark can replay a trace through them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class ReplicaLoad:
    inflight_requests: int = 0
    """Requests routed to the replica and not yet released."""
    inflight_prompt_tokens: int = 0
    """Prompt tokens of those requests the replica must compute (prompt minus matched prefix)."""
    inflight_decode_tokens: int = 0
    """Output tokens those requests may still generate (their max_tokens)."""
    waiting_requests: int = 0
    """The replica's own queue (vllm:num_requests_waiting), from its last /metrics scrape."""
    kv_usage: float = 0.0
    """Fraction of its KV blocks in use (vllm:kv_cache_usage_perc), from its last /metrics scrape."""
    queued_prefill_tokens: int = 0
    """Uncached prompt tokens of routed requests that have not sent their first token: prefill queued ahead."""


@dataclass
class Candidate:
    name: str
    load: ReplicaLoad
    matched_blocks: int = 0
    """Leading blocks of the prompt the index believes this replica holds."""
    indexed_blocks: int = 0
    """All blocks the index believes this replica holds (its cache's size as the router sees it)."""


@dataclass
class PolicyRequest:
    prompt_tokens: int
    max_tokens: int
    block_hashes: Sequence[int] = field(default_factory=list)
    block_size: int = 16
    fallback_key: int = 0
    """A key for hashing policies when the prompt has no full block."""


@dataclass
class Choice:
    index: int
    """Position of the chosen candidate in the list the policy was given."""
    reason: str
    """Why: 'prefix' (cache affinity won), 'load' (load decided), 'hash' (ring position), 'rotation'."""
    saved_tokens: int = 0
    """Prompt tokens the chosen replica is believed to hold (score part)."""
    load_tokens: float = 0.0
    """The chosen replica's load in token units (score part; 0 for policies that do not weigh tokens)."""


def saved_tokens(request: PolicyRequest, candidate: Candidate) -> int:
    """Prompt tokens the candidate is believed to hold already: its matched blocks, at most the whole prompt."""
    return min(candidate.matched_blocks * request.block_size, request.prompt_tokens)


def weighted_load_tokens(
    load: ReplicaLoad, decode_token_weight: float, waiting_request_tokens: float, kv_usage_tokens: float
) -> float:
    """A replica's load in prompt-token units: in-flight prompt tokens, decode tokens at `decode_token_weight`
    each, and the scraped queue and KV usage at their weights."""
    return (
        load.inflight_prompt_tokens
        + decode_token_weight * load.inflight_decode_tokens
        + waiting_request_tokens * load.waiting_requests
        + kv_usage_tokens * load.kv_usage
    )


class Policy(Protocol):
    name: str

    def choose(self, request: PolicyRequest, candidates: Sequence[Candidate]) -> Choice:
        """Pick one of `candidates` (never empty)."""


def load_cap(candidates: Sequence[Candidate], max_load_ratio: float, slack_requests: int = 0) -> int:
    """In-flight requests a replica may reach with this request: ceil(ratio * (total + 1) / n) + slack.

    The bounded-loads rule of Mirrokni et al. (consistent hashing with bounded loads): the least loaded replica
    always fits, so the rule never leaves a request without a replica. The slack keeps the integer bound from
    scattering prefixes at low load, where one request more is a large ratio but no real imbalance.
    """
    total = sum(c.load.inflight_requests for c in candidates)
    return math.ceil(max_load_ratio * (total + 1) / len(candidates)) + slack_requests


def within_cap(candidates: Sequence[Candidate], max_load_ratio: float, slack_requests: int = 0) -> list[int]:
    cap = load_cap(candidates, max_load_ratio, slack_requests)
    allowed = [i for i, c in enumerate(candidates) if c.load.inflight_requests + 1 <= cap]
    return allowed or [min(range(len(candidates)), key=lambda i: candidates[i].load.inflight_requests)]
