"""A cluster of simulated replicas behind a routing policy: arrivals, the router's view, per-request results.

The policy is the gateway's own code (gateway/routing/policies) or a baseline behind the same interface, and it
sees what the gateway's router would see when the request arrives:
- load the router keeps itself: requests it routed and not yet finished, their uncached prompt tokens (estimated
  from its index at routing time) and max output tokens, and `queued_prefill_tokens`: the uncached prompt tokens of
  requests that have not yet sent their first token (the gateway sees the first byte of each answer);
- what a /metrics scrape reports: the replica's waiting queue and KV usage;
- matched blocks from an index: `precise` is the replica's cache as its KV events report it, plus the prefixes in
  flight to it (the gateway's pending index); `history` is where the router sent each prefix (SGLang's
  approximate tree; the gateway's index for replicas without a feed).

Arrivals keep the trace's timestamps, scaled so the offered work is `utilisation` of the cluster's capacity (see
`time_scale`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.sim.kv import BLOCK_TOKENS, leading_blocks
from bench.sim.profiles import StepProfile
from bench.sim.replica import SimReplica, SimRequest
from bench.traces import TraceRequest
from engine.prefix_eviction import PrefixEviction
from gateway.routing.history_index import HistoryIndex
from gateway.routing.policies.base import Candidate, Policy, PolicyRequest, ReplicaLoad
from gateway.routing.prefix_index import match_prefix

# Decode rows a replica is assumed to batch when converting output tokens to busy time for the utilisation target.
REFERENCE_DECODE_ROWS = 32


@dataclass
class ClusterSpec:
    profile: StepProfile
    num_replicas: int
    kv_capacity_tokens: int
    """Per replica: the prefix cache and the running requests' KV share it."""
    time_scale: float
    """Trace seconds are multiplied by this (above 1: arrivals spread out)."""
    prefix_eviction: PrefixEviction = PrefixEviction.GDSF
    """Which unreferenced cached blocks a replica evicts first (the engine's --prefix-eviction)."""


@dataclass
class RunResult:
    policy: str
    ttft_s: list[float]
    """Per request, in trace order."""
    hit_rate: float
    prefill_tokens_per_replica: list[int]
    preemptions: int
    requests_per_replica: list[int] = field(default_factory=list)


def request_work_s(request: TraceRequest, cached_tokens: int, profile: StepProfile) -> float:
    """Busy seconds a request costs a replica: its uncached prefill, and its decode at a reference batch."""
    uncached = request.prompt_tokens - cached_tokens
    prefill_s = profile.prefill_token_s * uncached + profile.prefill_pair_s * uncached * request.prompt_tokens
    per_token_s = (
        profile.fixed_s / REFERENCE_DECODE_ROWS
        + profile.decode_row_s
        + profile.context_token_s * (request.prompt_tokens + request.output_tokens / 2)
    )
    return prefill_s + per_token_s * request.output_tokens


def time_scale(requests: Sequence[TraceRequest], profile: StepProfile, num_replicas: int, utilisation: float) -> float:
    """The factor on the trace's timestamps that makes offered work / (replicas x span) = `utilisation`.

    Work counts every prompt as uncached, so the figure is what the cluster would carry with no prefix cache:
    every policy stays below saturation, and the cache hits a routing earns show up as lower load and lower TTFT.
    """
    work_s = sum(request_work_s(request, 0, profile) for request in requests)
    span_s = max(requests[-1].arrival_s - requests[0].arrival_s, 1e-9)
    return work_s / (utilisation * num_replicas * span_s)


class _RouterView:
    """The gateway router's bookkeeping for one replica."""

    def __init__(self) -> None:
        self.load = ReplicaLoad()
        self.pending: dict[int, int] = {}  # block id -> requests in flight to the replica with it

    def pending_blocks(self, hashes: Sequence[int]) -> int:
        return leading_blocks(hashes, self.pending)


def simulate(
    requests: Sequence[TraceRequest],
    spec: ClusterSpec,
    policy: Policy,
    index: str = "precise",
    history: HistoryIndex | None = None,
    label: str | None = None,
) -> RunResult:
    replicas = [
        SimReplica(i, spec.profile, spec.kv_capacity_tokens, spec.prefix_eviction) for i in range(spec.num_replicas)
    ]
    views = [_RouterView() for _ in replicas]
    names = [f"r{i}" for i in range(spec.num_replicas)]
    sims = [
        SimRequest(i, r.arrival_s * spec.time_scale, r.prompt_tokens, r.output_tokens, r.block_hashes)
        for i, r in enumerate(requests)
    ]
    estimate: dict[int, tuple[int, int]] = {}  # request index -> (replica, uncached tokens the router estimated)
    counts = [0] * spec.num_replicas
    events: list[tuple[float, int]] = []  # (step end, replica index)
    busy = [False] * spec.num_replicas

    def on_first_token(request: SimRequest) -> None:
        replica, uncached = estimate[request.index]
        views[replica].load.queued_prefill_tokens -= uncached

    def on_finish(request: SimRequest) -> None:
        replica, uncached = estimate.pop(request.index)
        load = views[replica].load
        load.inflight_requests -= 1
        load.inflight_prompt_tokens -= uncached
        load.inflight_decode_tokens -= request.output_tokens
        pending = views[replica].pending
        for block_id in request.hashes:
            count = pending[block_id] - 1
            if count:
                pending[block_id] = count
            else:
                del pending[block_id]

    def start(replica: SimReplica, now_s: float, next_arrival_s: float) -> None:
        end_s = replica.start_step(now_s, next_arrival_s)
        busy[replica.index] = end_s is not None
        if end_s is not None:
            heapq.heappush(events, (end_s, replica.index))

    position = 0
    while position < len(sims) or events:
        arrival_s = sims[position].arrival_s if position < len(sims) else math.inf
        if events and events[0][0] < arrival_s:
            now_s, replica_index = heapq.heappop(events)
            replica = replicas[replica_index]
            for request in replica.finish_step():
                on_first_token(request)
            for request in replica.finished:
                on_finish(request)
            replica.finished.clear()
            start(replica, now_s, arrival_s)
            continue
        request = sims[position]
        position += 1
        chosen, matched = _route(request, replicas, views, names, policy, index, history)
        counts[chosen] += 1
        view = views[chosen]
        if history is not None:
            history.record(names[chosen], request.hashes, arrival_s)
        uncached = request.prompt_tokens - min(matched * BLOCK_TOKENS, request.prompt_tokens)
        estimate[request.index] = (chosen, uncached)
        view.load.inflight_requests += 1
        view.load.inflight_prompt_tokens += uncached
        view.load.inflight_decode_tokens += request.output_tokens
        view.load.queued_prefill_tokens += uncached
        for block_id in request.hashes:
            view.pending[block_id] = view.pending.get(block_id, 0) + 1
        replicas[chosen].enqueue(request)
        if not busy[chosen]:
            next_s = sims[position].arrival_s if position < len(sims) else math.inf
            start(replicas[chosen], arrival_s, next_s)
    prompt_tokens = sum(r.prompt_tokens for r in sims)
    return RunResult(
        policy=label or policy.name,
        ttft_s=[r.first_token_s - r.arrival_s for r in sims],
        hit_rate=sum(r.cached_tokens for r in sims) / prompt_tokens,
        prefill_tokens_per_replica=[r.prefill_tokens_computed for r in replicas],
        preemptions=sum(r.preemptions for r in replicas),
        requests_per_replica=counts,
    )


def _route(
    request: SimRequest,
    replicas: list[SimReplica],
    views: list[_RouterView],
    names: list[str],
    policy: Policy,
    index: str,
    history: HistoryIndex | None,
) -> tuple[int, int]:
    """The policy's pick and the blocks the router believes it holds."""
    if index == "history":
        assert history is not None, "the history index needs a HistoryIndex"
        history.expire(request.arrival_s)
        matched = match_prefix(request.hashes, history.holders)
        matches = [matched.get(name, 0) for name in names]
        indexed = [history.num_blocks(name) for name in names]
    else:
        matches = [
            max(r.kv.matched_blocks(request.hashes), v.pending_blocks(request.hashes)) for r, v in zip(replicas, views)
        ]
        indexed = [len(r.kv.refs) for r in replicas]
    candidates = []
    for replica, view, name, match, size in zip(replicas, views, names, matches, indexed):
        load = view.load
        load.waiting_requests = len(replica.waiting)  # as a /metrics scrape would report
        load.kv_usage = min(1.0, replica.kv.used_tokens() / replica.kv.capacity_tokens)
        candidates.append(Candidate(name, load, match, size))
    policy_request = PolicyRequest(
        request.prompt_tokens, request.output_tokens, request.hashes, BLOCK_TOKENS, request.index
    )
    chosen = policy.choose(policy_request, candidates).index
    return chosen, matches[chosen]
