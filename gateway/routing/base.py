"""The contract between the gateway's request path and replica selection.

The request path builds a RouteRequest once it has tokenized the prompt, asks `router.route(...)` for a Route,
sends the request to `route.url`, and reports the outcome with `router.release(route, outcome)` exactly once
(whatever happens: success, upstream error, client disconnect). A request that fails before its first byte is
routed again with the replicas that failed it in `exclude`, until one answers or `route` raises
NoHealthyReplicaError.

A model whose pool has prefill replicas is disaggregated (`disaggregated(model)`; docs/architecture.md,
"Disaggregated prefill and decode"): its requests are routed twice, once with `stage=Stage.PREFILL` and once with
`stage=Stage.DECODE`, each route released on its own. Every other request, and every request of a model without
prefill replicas, is routed once as `Stage.WHOLE`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

# Outcomes passed to Router.release.
OK = "ok"
ERROR_BEFORE_FIRST_BYTE = "error_before_first_byte"  # connect error, 5xx, timeout before any byte: retryable
ERROR_MID_STREAM = "error_mid_stream"
CLIENT_DISCONNECT = "client_disconnect"
NOT_ADMITTED = "not_admitted"  # sent while its admission ran, then refused: cancelled, the replica did no wrong


class Role(enum.StrEnum):
    """What a replica serves (`sluicegate engine --kv-role`)."""

    PREFILL = "prefill"
    """Hands a prompt's KV blocks to decode replicas; serves whole requests too (only when nothing else can)."""
    DECODE = "decode"
    """Pulls a prompt's KV blocks from a prefill replica and generates; serves whole requests too."""
    BOTH = "both"
    """Serves whole requests and takes no part in transfers (the default)."""


class Stage(enum.StrEnum):
    """Which part of a request a route is for."""

    WHOLE = "whole"
    """The whole request on one replica: any replica of a model without prefill replicas; of a disaggregated model
    (n > 1, embeddings) a `both` replica, else a decode one, else a prefill one."""
    PREFILL = "prefill"
    """Hop 1 of a disaggregated request: a prefill replica, by the model's policy (where the prompt's KV is)."""
    DECODE = "decode"
    """Hop 2: a decode replica by load and free KV; when none can take it a `both` replica, else a prefill one
    (those get no KV handoff: they prefill themselves)."""


class NoHealthyReplicaError(Exception):
    """No replica can take the request now (all down, draining or excluded). The gateway answers 503."""

    def __init__(self, model: str, retry_after_s: float = 1.0):
        super().__init__(f"no healthy replica for model {model!r}")
        self.model = model
        self.retry_after_s = retry_after_s


@dataclass
class RouteRequest:
    model: str
    prompt_token_ids: list[int] | None  # None when the model's tokenizer is unknown to the gateway
    prompt_text: str  # the rendered prompt; used for character-based hashing when there are no token ids
    max_tokens: int
    cache_salt: str = ""  # the tenant's id or its cache group's salt (docs/architecture.md, "Tenant isolation")
    block_hashes: list[int] = field(default_factory=list)  # filled by the request path from prompt_token_ids
    stage: Stage = Stage.WHOLE
    handed_over_tokens: int = 0
    """Decode hop: prompt tokens whose KV the prefill replica hands over (its `remote_num_tokens`). A decode replica
    reads them instead of computing them, so they queue no prefill there; they still take its KV."""


@dataclass
class Route:
    replica: str  # replica name, stable across restarts of the gateway
    url: str  # base URL, e.g. http://127.0.0.1:8100
    matched_prefix_tokens: int = 0  # prefix tokens the chosen replica is believed to hold
    policy: str = ""
    ticket: int = 0  # the router's handle on this routed request, for release (0: not from a ticketing router)
    role: Role = Role.BOTH  # the chosen replica's: a decode hop sends the prefill's KV handoff to a decode replica only


class Router(Protocol):
    async def start(self) -> None:
        """Start background work (health checks, KV-event subscriptions)."""

    async def close(self) -> None: ...

    def models(self) -> list[str]:
        """Models that have at least one configured replica."""

    def disaggregated(self, model: str) -> bool:
        """The model's pool has prefill replicas: its requests go in two hops (PREFILL, then DECODE)."""

    def route(self, request: RouteRequest, exclude: frozenset[str] = frozenset()) -> Route:
        """Pick a replica; raise NoHealthyReplicaError when none can take it."""

    def first_token(self, route: Route) -> None:
        """The routed request's first byte came back: its prefill is done (load estimates that count queued prefill
        drop it here rather than at release)."""

    def release(self, route: Route, outcome: str) -> None:
        """The routed request ended with `outcome` (one of the constants above)."""


@dataclass
class ReplicaInfo:
    """One replica as the admin API lists it."""

    model: str
    name: str
    url: str
    role: Role
    state: str  # active | draining | removing (draining, and forgotten once its last request is released)
    healthy: bool  # the active health checks' verdict
    breaker: str  # closed | open | half_open (passive health: request outcomes)
    kv_events: bool  # configured to follow the replica's /v1/kv/events feed
    kv_feed_connected: bool
    inflight_requests: int
    waiting_requests: int  # vllm:num_requests_waiting at the last scrape
    kv_usage: float  # vllm:kv_cache_usage_perc at the last scrape (0..1)
    cached_blocks: int  # blocks the router believes the replica holds


@runtime_checkable
class ReplicaAdmin(Protocol):
    """Run-time pool changes, for routers that support them (the admin API checks with isinstance).

    Unknown models or replicas raise KeyError (answer 404); adding a name that exists with another URL raises
    ValueError (answer 409).
    """

    def add_replica(
        self, model: str, name: str, url: str, kv_events: bool = True, role: Role = Role.BOTH
    ) -> ReplicaInfo: ...

    def drain_replica(self, model: str, name: str) -> ReplicaInfo: ...

    def remove_replica(self, model: str, name: str) -> ReplicaInfo: ...

    def replicas(self, model: str | None = None) -> list[ReplicaInfo]: ...
