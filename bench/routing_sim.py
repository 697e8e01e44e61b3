"""Trace-replay simulation of replica selection: the live router's policy classes against simulated replicas.

Each simulated replica has an LRU prefix cache of `cache_blocks` blocks (trace blocks of 512 tokens), one FIFO
prefill server at `prefill_tokens_per_s` (TTFT proxy = queueing + prefill of the uncached part) and decodes that run
beside it for `output_tokens * decode_s_per_token` (batched decoding: they do not hold the prefill server). A
request holds replica load from arrival to its last token.

What a policy sees is what the live router sees: in-flight requests, in-flight uncached prompt tokens and max output
tokens per replica, the replica's prefill queue length (its `num_requests_waiting`), cache fill (`kv_cache_usage`),
and matched blocks from one of two indexes: `precise` (the replica's real cache, as a KV events feed reports it) or
`history` (where the router sent each prefix, bounded and with a TTL, as for replicas without a feed).

Reported per policy: prefix hit rate (cached prompt tokens / prompt tokens), max/mean load (the busiest replica's
time-averaged in-flight requests over the mean), TTFT proxy mean and p90.
"""

from __future__ import annotations

import heapq
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.routing.history_index import HistoryIndex
from gateway.routing.policies.base import Candidate, Policy, PolicyRequest, ReplicaLoad
from gateway.routing.prefix_index import leading_run, match_prefix

TRACE_BLOCK_TOKENS = 512  # the Mooncake traces' hash_ids name ~512-token blocks


@dataclass
class TraceRequest:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    block_hashes: list[int]


def load_trace(path: str, limit: int | None = None) -> list[TraceRequest]:
    requests = []
    with open(path) as f:
        for line in f:
            if limit is not None and len(requests) >= limit:
                break
            row = json.loads(line)
            requests.append(
                TraceRequest(row["timestamp"] / 1000.0, row["input_length"], row["output_length"], row["hash_ids"])
            )
    return requests


@dataclass
class ServiceModel:
    prefill_tokens_per_s: float = 10_000.0
    decode_s_per_token: float = 0.02


@dataclass
class SimResult:
    policy: str
    hit_rate: float
    max_over_mean_load: float
    ttft_mean_s: float
    ttft_p90_s: float
    requests_per_replica: list[int] = field(default_factory=list)


class LruCache:
    def __init__(self, capacity_blocks: int | None) -> None:
        self.capacity_blocks = capacity_blocks
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def matched(self, hashes: Sequence[int]) -> int:
        depth = 0
        for block_hash in hashes:
            if block_hash not in self.blocks:
                break
            depth += 1
        return depth

    def insert(self, hashes: Sequence[int]) -> None:
        # Deepest first, so the shared root is most recent: the engine evicts leaves before the prefixes they extend.
        for block_hash in reversed(hashes):
            self.blocks[block_hash] = None
            self.blocks.move_to_end(block_hash)
        while self.capacity_blocks is not None and len(self.blocks) > self.capacity_blocks:
            self.blocks.popitem(last=False)


class SimReplica:
    def __init__(self, name: str, cache_blocks: int) -> None:
        self.name = name
        self.cache = LruCache(cache_blocks)
        self.load = ReplicaLoad()
        self.prefill_free_at_s = 0.0
        self.prefill_ends: list[float] = []  # heap: prefill end times of queued/running prefills
        self.busy_request_s = 0.0  # sum of residence times: time-averaged in-flight = busy_request_s / duration
        self.num_requests = 0

    def waiting_at(self, now_s: float) -> int:
        while self.prefill_ends and self.prefill_ends[0] <= now_s:
            heapq.heappop(self.prefill_ends)
        return len(self.prefill_ends)


def ceiling_hit_rate(requests: Sequence[TraceRequest], capacity_blocks: int | None) -> float:
    """One cache for the whole cluster (unbounded: no router can beat it)."""
    cache = LruCache(capacity_blocks)
    cached = total = 0
    for request in requests:
        cached += min(cache.matched(request.block_hashes) * TRACE_BLOCK_TOKENS, request.prompt_tokens)
        total += request.prompt_tokens
        cache.insert(request.block_hashes)
    return cached / total


def simulate(
    requests: Sequence[TraceRequest],
    policy: Policy,
    num_replicas: int,
    cache_blocks: int,
    service: ServiceModel,
    index: str = "precise",
    history: HistoryIndex | None = None,
    label: str | None = None,
) -> SimResult:
    """Replay `requests` through `policy`; `index` is 'precise' (KV events) or 'history' (routing history)."""
    replicas = [SimReplica(f"r{i}", cache_blocks) for i in range(num_replicas)]
    by_name = {r.name: r for r in replicas}
    completions: list[tuple[float, int, str, int, int]] = []  # (end_s, seq, replica, prompt, output)
    cached_tokens = total_tokens = 0
    ttfts: list[float] = []
    for seq, request in enumerate(requests):
        now_s = request.arrival_s
        _complete_until(completions, by_name, now_s)
        matched = _matches(request, replicas, index, history, now_s)
        candidates = [
            Candidate(
                name=r.name,
                load=_observed_load(r, now_s, cache_blocks),
                matched_blocks=matched.get(r.name, 0),
                indexed_blocks=history.num_blocks(r.name) if history else len(r.cache.blocks),
            )
            for r in replicas
        ]
        policy_request = PolicyRequest(
            request.prompt_tokens, request.output_tokens, request.block_hashes, TRACE_BLOCK_TOKENS, seq
        )
        replica = replicas[policy.choose(policy_request, candidates).index]
        hit = min(replica.cache.matched(request.block_hashes) * TRACE_BLOCK_TOKENS, request.prompt_tokens)
        uncached = request.prompt_tokens - hit
        cached_tokens += hit
        total_tokens += request.prompt_tokens
        replica.cache.insert(request.block_hashes)
        if history is not None:
            history.record(replica.name, request.block_hashes, now_s)
        prefill_end_s = max(now_s, replica.prefill_free_at_s) + uncached / service.prefill_tokens_per_s
        replica.prefill_free_at_s = prefill_end_s
        heapq.heappush(replica.prefill_ends, prefill_end_s)
        end_s = prefill_end_s + request.output_tokens * service.decode_s_per_token
        ttfts.append(prefill_end_s - now_s)
        replica.busy_request_s += end_s - now_s
        replica.num_requests += 1
        replica.load.inflight_requests += 1
        replica.load.inflight_prompt_tokens += uncached
        replica.load.inflight_decode_tokens += request.output_tokens
        heapq.heappush(completions, (end_s, seq, replica.name, uncached, request.output_tokens))
    loads = [r.busy_request_s for r in replicas]
    ttfts.sort()
    return SimResult(
        policy=label or policy.name,
        hit_rate=cached_tokens / total_tokens,
        max_over_mean_load=max(loads) / (sum(loads) / len(loads)),
        ttft_mean_s=sum(ttfts) / len(ttfts),
        ttft_p90_s=ttfts[int(0.9 * (len(ttfts) - 1))],
        requests_per_replica=[r.num_requests for r in replicas],
    )


def _complete_until(completions: list, by_name: dict[str, SimReplica], now_s: float) -> None:
    while completions and completions[0][0] <= now_s:
        _, _, name, uncached, output_tokens = heapq.heappop(completions)
        load = by_name[name].load
        load.inflight_requests -= 1
        load.inflight_prompt_tokens -= uncached
        load.inflight_decode_tokens -= output_tokens


def _observed_load(replica: SimReplica, now_s: float, cache_blocks: int) -> ReplicaLoad:
    load = replica.load
    return ReplicaLoad(
        inflight_requests=load.inflight_requests,
        inflight_prompt_tokens=load.inflight_prompt_tokens,
        inflight_decode_tokens=load.inflight_decode_tokens,
        waiting_requests=replica.waiting_at(now_s),
        kv_usage=len(replica.cache.blocks) / cache_blocks,
    )


def _matches(
    request: TraceRequest, replicas: list[SimReplica], index: str, history: HistoryIndex | None, now_s: float
) -> dict[str, int]:
    if index == "history":
        assert history is not None, "the history index needs a HistoryIndex"
        history.expire(now_s)
        return match_prefix(request.block_hashes, history.holders)
    return {r.name: leading_run(request.block_hashes, r.cache.blocks) for r in replicas}
