"""Replica selection for one model: its replica pool, prefix indexes, policy and background probes.

Per request: candidates = replicas that are active, healthy, breaker-admitted and not excluded; each gets
`matched_blocks` from the index that suits it (its KV events feed plus the prefixes in flight to it, or the
router's routing history when it has no feed or the request has no token ids); the policy picks; the pick's load
and index entries are updated at once, so the next request sees them. `release` undoes the load and feeds the
outcome to the breaker. Everything runs on the event loop thread; nothing here blocks or awaits on the request path.

A pool with prefill replicas is disaggregated (base.py's Stage): candidates are then the replicas of the request's
stage, tier by tier (`STAGE_TIERS`: a tier is used when no replica of the ones before it can take the request), and
the decode hop is chosen by the decode policy (policies/decode_load.py). A pool without prefill replicas routes every
request as before, whatever its stage and its replicas' roles.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass

import httpx

from gateway.routing.base import (
    CLIENT_DISCONNECT,
    NOT_ADMITTED,
    OK,
    NoHealthyReplicaError,
    ReplicaInfo,
    Role,
    Route,
    RouteRequest,
    Stage,
)
from gateway.routing.config import ModelRoutingConfig, ReplicaConfig
from gateway.routing.hashing import RequestHashes
from gateway.routing.history_index import HistoryIndex
from gateway.routing.kv_events import KvEventsSubscriber
from gateway.routing.metrics import Metric, RoutingMetrics
from gateway.routing.policies import Candidate, Policy, PolicyRequest, make_decode_policy, make_policy
from gateway.routing.prefix_index import PendingIndex, PreciseIndex, match_prefix
from gateway.routing.probes import probe_health, scrape_load
from gateway.routing.replica import ACTIVE, DRAINING, REMOVING, Replica

logger = logging.getLogger(__name__)

# Tickets are unique across every ModelRouter of the process, so PrefixRouter.release finds the owner by ticket.
_tickets = itertools.count(1)

STAGE_TIERS: dict[Stage, tuple[Role, ...]] = {
    Stage.PREFILL: (Role.PREFILL,),
    # Every replica serves requests whole too (docs/architecture.md), so the decode hop and whole requests go on
    # while a pool is down: a decode hop without a decode replica is served whole, with no KV handoff.
    Stage.DECODE: (Role.DECODE, Role.BOTH, Role.PREFILL),
    Stage.WHOLE: (Role.BOTH, Role.DECODE, Role.PREFILL),
}
"""A disaggregated model's candidates per stage: the routable replicas of the first role that has any."""


class UnknownReplicaError(KeyError):
    """The admin API named a model or replica the router does not have (answer 404)."""


@dataclass
class _Ticket:
    replica: str
    uncached_tokens: int
    """Prompt tokens whose KV the replica must provide (compute or read): in its inflight_prompt_tokens."""
    prefill_tokens: int
    """Of those, the ones it computes: in its queued_prefill_tokens until the first token."""
    max_tokens: int
    pending_hashes: list[int]
    breaker_trial: bool
    before_first_token: bool = True
    """Its prefill tokens still count in the replica's queued_prefill_tokens."""


class ModelRouter:
    def __init__(self, config: ModelRoutingConfig, metrics: RoutingMetrics) -> None:
        self.model = config.model
        self.config = config
        self.metrics = metrics
        self.policy = make_policy(config.policy)
        self.decode_policy = make_decode_policy(config.policy)
        self.replicas: dict[str, Replica] = {}
        self.disaggregated = False
        """The pool has prefill replicas: requests are routed by stage."""
        self.precise = PreciseIndex()
        self.pending = PendingIndex()
        self.history = HistoryIndex(config.index.history_ttl_s, config.index.history_max_blocks)
        self._tickets: dict[int, _Ticket] = {}
        self._tasks: dict[str, list[asyncio.Task[None]]] = {}
        self._client: httpx.AsyncClient | None = None
        for replica_config in config.replicas:
            self._add(replica_config)

    # -- lifecycle -------------------------------------------------------------------------------------------------

    def start(self, client: httpx.AsyncClient) -> None:
        self._client = client
        for name in self.replicas:
            self._start_tasks(name, client)

    async def close(self) -> None:
        tasks = [task for tasks in self._tasks.values() for task in tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._client = None

    # -- request path ----------------------------------------------------------------------------------------------

    def route(self, request: RouteRequest, exclude: frozenset[str]) -> Route:
        hashes = RequestHashes(request, self.config.index.block_size, self.config.index.chars_per_block)
        policy = self.policy
        if self.disaggregated:
            replicas = self._stage_candidates(request.stage, exclude)
            if request.stage == Stage.DECODE:
                policy = self.decode_policy
        else:
            replicas = [r for r in self.replicas.values() if r.name not in exclude and r.routable()]
        if not replicas:
            if request.stage != Stage.PREFILL:  # a prefill hop that finds none is skipped, the client not refused
                self._metric(self.metrics.no_replica).inc()
            raise NoHealthyReplicaError(self.model, retry_after_s=self._retry_after_s())
        matched_tokens = self._matched_tokens(hashes, replicas)
        block_size = hashes.block_size
        candidates = [
            Candidate(r.name, r.load, matched_tokens.get(r.name, 0) // block_size, self._indexed_blocks(r.name))
            for r in replicas
        ]
        policy_request = PolicyRequest(
            prompt_tokens=hashes.prompt_tokens,
            max_tokens=request.max_tokens,
            block_hashes=hashes.history_hashes(),
            block_size=block_size,
            fallback_key=hashes.fallback_key(),
        )
        choice = policy.choose(policy_request, candidates)
        replica = replicas[choice.index]
        saved_tokens = min(matched_tokens.get(replica.name, 0), hashes.prompt_tokens)
        # Only a decode replica gets the handoff (the request path sends it nowhere else): it reads those tokens.
        handed_over_tokens = request.handed_over_tokens if replica.config.role == Role.DECODE else 0
        ticket = self._admit(replica, hashes, saved_tokens, handed_over_tokens, request.max_tokens)
        self._observe(replica.name, policy, choice.reason, hashes.prompt_tokens, saved_tokens, choice.load_tokens)
        return Route(replica.name, replica.url, saved_tokens, policy.name, ticket, replica.config.role)

    def owns(self, ticket: int) -> bool:
        return ticket in self._tickets

    def first_token(self, route: Route) -> None:
        """The routed request's first token arrived: its prefill no longer queues ahead of later requests."""
        ticket = self._tickets.get(route.ticket)
        replica = self.replicas.get(ticket.replica) if ticket is not None else None
        if ticket is not None and replica is not None and ticket.before_first_token:
            ticket.before_first_token = False
            replica.load.queued_prefill_tokens -= ticket.prefill_tokens

    def release(self, route: Route, outcome: str) -> None:
        self.first_token(route)  # a request that ends without a first token queues nothing either
        ticket = self._tickets.pop(route.ticket, None)
        if ticket is None:
            return  # released twice, or routed by another router: nothing of ours to undo
        replica = self.replicas.get(ticket.replica)
        if replica is None:
            return
        replica.load.inflight_requests -= 1
        replica.load.inflight_prompt_tokens -= ticket.uncached_tokens
        replica.load.inflight_decode_tokens -= ticket.max_tokens
        self.pending.discard(replica.name, ticket.pending_hashes)
        if outcome == OK:
            replica.breaker.record_success()
        elif outcome in (CLIENT_DISCONNECT, NOT_ADMITTED):
            replica.breaker.record_neutral(ticket.breaker_trial)
        else:
            replica.breaker.record_failure()
        self._metric(self.metrics.outcomes, replica.name, outcome).inc()
        self._metric(self.metrics.inflight, replica.name).set(replica.load.inflight_requests)
        self._update_health_gauge(replica)
        if replica.state == REMOVING and replica.load.inflight_requests == 0:
            self._finalize_removal(replica.name)

    # -- admin -----------------------------------------------------------------------------------------------------

    def add_replica(self, config: ReplicaConfig) -> ReplicaInfo:
        existing = self.replicas.get(config.name)
        same = existing is not None and (existing.url, existing.config.role) == (config.url, config.role)
        if existing is not None and same and existing.state != ACTIVE:
            existing.state = ACTIVE  # re-adding a draining replica puts it back in service
            return self._info(existing)
        if existing is not None:
            raise ValueError(
                f"replica {config.name!r} of model {self.model!r} exists ({existing.url}, role "
                f"{existing.config.role}); remove it first"
            )
        replica = self._add(config)
        if self._client is not None:
            self._start_tasks(config.name, self._client)
        return self._info(replica)

    def drain_replica(self, name: str) -> ReplicaInfo:
        replica = self._get(name)
        if replica.state == ACTIVE:
            replica.state = DRAINING
        self._update_health_gauge(replica)
        return self._info(replica)

    def remove_replica(self, name: str) -> ReplicaInfo:
        """Stop routing to it now; it leaves once its in-flight requests are released (none is lost)."""
        replica = self._get(name)
        replica.state = REMOVING
        info = self._info(replica)
        if replica.load.inflight_requests == 0:
            self._finalize_removal(name)
        else:
            self._update_health_gauge(replica)
        return info

    def infos(self) -> list[ReplicaInfo]:
        return [self._info(r) for r in self.replicas.values()]

    # -- internals -------------------------------------------------------------------------------------------------

    def _add(self, config: ReplicaConfig) -> Replica:
        replica = Replica.from_config(config, self.config.health)
        self.replicas[config.name] = replica
        self.disaggregated = self.disaggregated or config.role == Role.PREFILL
        self._update_health_gauge(replica)
        return replica

    def _stage_candidates(self, stage: Stage, exclude: frozenset[str]) -> list[Replica]:
        routable = [r for r in self.replicas.values() if r.name not in exclude and r.routable()]
        for role in STAGE_TIERS[stage]:
            tier = [r for r in routable if r.config.role == role]
            if tier:
                return tier
        return []

    def _get(self, name: str) -> Replica:
        if name not in self.replicas:
            raise UnknownReplicaError(f"model {self.model!r} has no replica {name!r}")
        return self.replicas[name]

    def _uses_feed(self, replica: Replica, hashes: RequestHashes) -> bool:
        return replica.config.kv_events and hashes.by_tokens

    def _replica_block_size(self, name: str) -> int:
        return self.precise.block_size.get(name, self.config.index.block_size)

    def _matched_tokens(self, hashes: RequestHashes, replicas: list[Replica]) -> dict[str, int]:
        matched: dict[str, int] = {}
        history: dict[str, int] | None = None
        for replica in replicas:
            if self._uses_feed(replica, hashes):
                size = self._replica_block_size(replica.name)
                token_hashes = hashes.token_hashes(size)
                blocks = max(
                    self.precise.matched_blocks(replica.name, token_hashes),
                    self.pending.matched_blocks(replica.name, token_hashes),
                )
                matched[replica.name] = blocks * size
            else:
                if history is None:
                    self.history.expire(time.monotonic())
                    history = match_prefix(hashes.history_hashes(), self.history.holders)
                matched[replica.name] = history.get(replica.name, 0) * hashes.block_size
        return matched

    def _indexed_blocks(self, name: str) -> int:
        return self.precise.num_blocks(name) + self.history.num_blocks(name)

    def _admit(
        self, replica: Replica, hashes: RequestHashes, saved_tokens: int, handed_over_tokens: int, max_tokens: int
    ) -> int:
        pending_hashes: list[int] = []
        if self._uses_feed(replica, hashes):
            pending_hashes = hashes.token_hashes(self._replica_block_size(replica.name))
            self.pending.add(replica.name, pending_hashes)
        else:
            self.history.record(replica.name, hashes.history_hashes(), time.monotonic())
        uncached_tokens = hashes.prompt_tokens - saved_tokens
        prefill_tokens = max(0, hashes.prompt_tokens - max(saved_tokens, handed_over_tokens))
        replica.load.inflight_requests += 1
        replica.load.inflight_prompt_tokens += uncached_tokens
        replica.load.inflight_decode_tokens += max_tokens
        replica.load.queued_prefill_tokens += prefill_tokens
        breaker_trial = replica.breaker.on_routed()
        ticket = next(_tickets)
        self._tickets[ticket] = _Ticket(
            replica.name, uncached_tokens, prefill_tokens, max_tokens, pending_hashes, breaker_trial
        )
        return ticket

    def _observe(
        self, name: str, policy: Policy, reason: str, prompt_tokens: int, saved_tokens: int, load_tokens: float
    ) -> None:
        self._metric(self.metrics.decisions, name, policy.name, reason).inc()
        self._metric(self.metrics.prompt_tokens).inc(prompt_tokens)
        self._metric(self.metrics.matched_prefix_tokens, name).inc(saved_tokens)
        self._metric(self.metrics.score_saved_tokens).observe(saved_tokens)
        self._metric(self.metrics.score_load_tokens).observe(load_tokens)
        self._metric(self.metrics.inflight, name).set(self.replicas[name].load.inflight_requests)

    def _retry_after_s(self) -> float:
        waits = [r.breaker.retry_after_s() for r in self.replicas.values() if r.state == ACTIVE and r.healthy]
        waits = [w for w in waits if w > 0]
        return max(1.0, min(waits)) if waits else self.config.health.interval_s

    def _finalize_removal(self, name: str) -> None:
        for task in self._tasks.pop(name, []):
            task.cancel()
        self.replicas.pop(name, None)
        self.disaggregated = any(r.config.role == Role.PREFILL for r in self.replicas.values())
        self.precise.forget(name)
        self.history.forget(name)
        self.metrics.forget_replica(self.model, name)

    def _info(self, replica: Replica) -> ReplicaInfo:
        return replica.info(self.model, self._indexed_blocks(replica.name))

    def _metric(self, metric: Metric, *labels: str) -> Metric:
        return self.metrics.child(metric, self.model, *labels)

    def _update_health_gauge(self, replica: Replica) -> None:
        self._metric(self.metrics.healthy, replica.name).set(1 if replica.routable() else 0)

    def _start_tasks(self, name: str, client: httpx.AsyncClient) -> None:
        replica = self.replicas[name]
        tasks = [asyncio.create_task(self._probe_loop(replica, client), name=f"probe:{self.model}:{name}")]
        if replica.config.kv_events:
            tasks.append(
                asyncio.create_task(self._subscriber(replica, client).run(), name=f"kv-events:{self.model}:{name}")
            )
        self._tasks[name] = tasks

    def _subscriber(self, replica: Replica, client: httpx.AsyncClient) -> KvEventsSubscriber:
        def on_connected(connected: bool) -> None:
            replica.kv_feed_connected = connected

        return KvEventsSubscriber(
            replica.name,
            replica.url,
            self.precise,
            client,
            self.config.index.resync_backoff_s,
            on_connected=on_connected,
            on_resync=lambda reason: self._metric(self.metrics.kv_resyncs, replica.name, reason).inc(),
            on_event=lambda kind: self._metric(self.metrics.kv_events, replica.name, kind).inc(),
        )

    async def _probe_loop(self, replica: Replica, client: httpx.AsyncClient) -> None:
        health = self.config.health
        while True:
            try:
                ok = await probe_health(client, replica.url, health.timeout_s)
                load = await scrape_load(client, replica.url, health.timeout_s) if ok else None
            except Exception:  # a probe must never end the loop: count it as a failed probe and go on
                logger.exception("probing %s failed", replica.url)
                ok, load = False, None
            replica.record_probe(ok, health)
            if load is not None:
                replica.load.waiting_requests, replica.load.kv_usage = load
            if replica.name in self.replicas:
                self._update_health_gauge(replica)
            await asyncio.sleep(health.interval_s)
