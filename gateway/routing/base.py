"""The contract between the gateway's request path and replica selection.

The request path builds a RouteRequest once it has tokenized the prompt, asks `router.route(...)` for a Route,
sends the request to `route.url`, and reports the outcome with `router.release(route, outcome)` exactly once
(whatever happens: success, upstream error, client disconnect). A request that fails before its first byte may
be retried once with `exclude={route.replica}`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

# Outcomes passed to Router.release.
OK = "ok"
ERROR_BEFORE_FIRST_BYTE = "error_before_first_byte"  # connect error, 5xx, timeout before any byte: retryable
ERROR_MID_STREAM = "error_mid_stream"
CLIENT_DISCONNECT = "client_disconnect"


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
    cache_salt: str = ""  # tenant id for isolate_cache tenants (DESIGN.md, "Tenant isolation")
    block_hashes: list[int] = field(default_factory=list)  # filled by the request path from prompt_token_ids


@dataclass
class Route:
    replica: str  # replica name, stable across restarts of the gateway
    url: str  # base URL, e.g. http://127.0.0.1:8100
    matched_prefix_tokens: int = 0  # prefix tokens the chosen replica is believed to hold
    policy: str = ""


class Router(Protocol):
    async def start(self) -> None:
        """Start background work (health checks, KV-event subscriptions)."""

    async def close(self) -> None: ...

    def models(self) -> list[str]:
        """Models that have at least one configured replica."""

    def route(self, request: RouteRequest, exclude: frozenset[str] = frozenset()) -> Route:
        """Pick a replica; raise NoHealthyReplicaError when none can take it."""

    def release(self, route: Route, outcome: str) -> None:
        """The routed request ended with `outcome` (one of the constants above)."""
