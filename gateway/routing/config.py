"""Routing configuration per model: typed, validated once, errors that name the value and the fix.

`parse_models_config` turns the `models:` mapping of the gateway YAML (factory.py documents its shape) into one
`ModelRoutingConfig` per model.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from sluicegate.block_hash import DEFAULT_BLOCK_SIZE

POLICY_NAMES = ("round_robin", "least_loaded", "consistent_hash", "prefix_affinity")


class RoutingConfigError(ValueError):
    """The routing section of the config is wrong; the message names the value and the fix."""


@dataclass
class ReplicaConfig:
    name: str
    """Stable replica name (metrics label, admin API key, debug header)."""
    url: str
    """Base URL, e.g. http://10.0.0.5:8100 (no trailing /v1)."""
    kv_events: bool = True
    """Subscribe to GET /v1/kv/events for a precise prefix index; False for upstreams without a feed (vLLM, others)."""

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise RoutingConfigError(f"replica name={self.name!r}: give each replica a non-empty name")
        if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise RoutingConfigError(f"replica {self.name!r} url={self.url!r}: use http://host:port or https://...")
        self.url = self.url.rstrip("/")


@dataclass
class PolicyConfig:
    """Knobs of every policy; each policy reads its own. prefix_affinity.py explains how they interact."""

    name: str = "prefix_affinity"
    """round_robin, least_loaded, consistent_hash or prefix_affinity."""
    max_load_ratio: float = 1.25
    """Load bound: no replica gets a request that would put its in-flight count above
    ceil(max_load_ratio * (total in-flight + 1) / healthy replicas). consistent_hash and prefix_affinity."""
    max_load_slack_requests: int = 8
    """Requests a replica may exceed the ratio bound by, so the integer bound does not scatter prefixes at low load."""
    load_weight: float = 0.02
    """prefix_affinity: prompt tokens the score gives up per token of replica load (prefix_affinity.py says why
    it is small: in-flight prompt tokens include requests long past their prefill)."""
    decode_token_weight: float = 0.1
    """prefix_affinity: load tokens per in-flight decode token (a decode token costs far less than a prefill one)."""
    waiting_request_tokens: float = 512.0
    """prefix_affinity: load tokens per request waiting in the replica's own queue (vllm:num_requests_waiting)."""
    kv_usage_tokens: float = 2048.0
    """prefix_affinity: load tokens at 100% KV usage (vllm:kv_cache_usage_perc), scaled linearly."""
    hash_key_blocks: int = 4
    """consistent_hash: the request's key is the hash of its first min(n, hash_key_blocks) blocks."""
    virtual_nodes: int = 64
    """consistent_hash: ring points per replica."""

    def __post_init__(self) -> None:
        if self.name not in POLICY_NAMES:
            raise RoutingConfigError(f"policy={self.name!r} is not one of {POLICY_NAMES}")
        if self.max_load_ratio < 1.0:
            raise RoutingConfigError(f"max_load_ratio={self.max_load_ratio}: use a value >= 1.0 (1.25 is typical)")
        for name in ("load_weight", "decode_token_weight", "waiting_request_tokens", "kv_usage_tokens"):
            if getattr(self, name) < 0:
                raise RoutingConfigError(f"{name}={getattr(self, name)}: use a value >= 0")
        if self.max_load_slack_requests < 0:
            raise RoutingConfigError(f"max_load_slack_requests={self.max_load_slack_requests}: use a value >= 0")
        if self.hash_key_blocks < 1 or self.virtual_nodes < 1:
            raise RoutingConfigError(
                f"hash_key_blocks={self.hash_key_blocks}, virtual_nodes={self.virtual_nodes}: use values >= 1"
            )


@dataclass
class HealthConfig:
    interval_s: float = 2.0
    """Period of GET /health and GET /metrics per replica."""
    timeout_s: float = 1.0
    """Timeout of one probe; a slower answer counts as a failure."""
    unhealthy_after: int = 2
    """Consecutive failed probes that mark a replica down."""
    healthy_after: int = 1
    """Consecutive good probes that bring it back."""
    breaker_failures: int = 3
    """Consecutive failed requests (errors, timeouts) that open the replica's circuit breaker."""
    breaker_open_s: float = 5.0
    """How long an open breaker refuses requests before letting one trial request through (half-open)."""

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.timeout_s <= 0 or self.breaker_open_s <= 0:
            raise RoutingConfigError(
                f"interval_s={self.interval_s}, timeout_s={self.timeout_s}, breaker_open_s={self.breaker_open_s}: "
                "use positive seconds"
            )
        if self.unhealthy_after < 1 or self.healthy_after < 1 or self.breaker_failures < 1:
            raise RoutingConfigError("unhealthy_after, healthy_after and breaker_failures must be >= 1")


@dataclass
class IndexConfig:
    block_size: int = DEFAULT_BLOCK_SIZE
    """Tokens per block of the request path's hashes; a replica's snapshot may announce another size."""
    chars_per_block: int = 64
    """Characters per block for character-based hashing (no token ids: the model's tokenizer is unknown)."""
    history_ttl_s: float = 300.0
    """Approximate index: how long a routed prefix is believed to stay cached on a replica without a feed."""
    history_max_blocks: int = 1_000_000
    """Approximate index: most (replica, block) entries kept; the least recently routed go first."""
    resync_backoff_s: float = 0.5
    """KV-events feed: first reconnect delay (doubles up to 10 s while the replica stays unreachable)."""

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.chars_per_block < 1 or self.history_max_blocks < 1:
            raise RoutingConfigError("block_size, chars_per_block and history_max_blocks must be >= 1")
        if self.history_ttl_s <= 0 or self.resync_backoff_s <= 0:
            raise RoutingConfigError(
                f"history_ttl_s={self.history_ttl_s}, resync_backoff_s={self.resync_backoff_s}: use positive seconds"
            )


@dataclass
class ModelRoutingConfig:
    model: str
    replicas: list[ReplicaConfig]
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    index: IndexConfig = field(default_factory=IndexConfig)

    def __post_init__(self) -> None:
        names = [r.name for r in self.replicas]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise RoutingConfigError(f"model {self.model!r}: replica names {duplicates} appear more than once")


def _build(cls: type, raw: Any, where: str):
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        raise RoutingConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise RoutingConfigError(f"{where}: unknown keys {unknown}; known: {sorted(known)}")
    try:
        return cls(**raw)
    except TypeError as exc:
        raise RoutingConfigError(f"{where}: {exc}") from None


def _parse_replicas(model: str, raw: Any) -> list[ReplicaConfig]:
    if not isinstance(raw, list):
        raise RoutingConfigError(f"models.{model}.replicas: expected a list of {{name, url}} mappings")
    return [_build(ReplicaConfig, item, f"models.{model}.replicas[{i}]") for i, item in enumerate(raw)]


def parse_model_config(model: str, raw: Any) -> ModelRoutingConfig:
    if not isinstance(raw, dict):
        raise RoutingConfigError(f"models.{model}: expected a mapping with 'replicas'")
    unknown = sorted(set(raw) - {"replicas", "routing", "health", "index"})
    if unknown:
        raise RoutingConfigError(f"models.{model}: unknown keys {unknown}; known: health, index, replicas, routing")
    routing = raw.get("routing") or {}
    if not isinstance(routing, dict):
        raise RoutingConfigError(f"models.{model}.routing: expected a mapping, got {type(routing).__name__}")
    # YAML says `policy:` and a pool-wide `kv_events:`; the dataclasses say `name` and per replica.
    policy_raw = {("name" if key == "policy" else key): value for key, value in routing.items() if key != "kv_events"}
    kv_events_default = routing.get("kv_events", True)
    replicas_raw = raw.get("replicas", [])
    if isinstance(replicas_raw, list):
        replicas_raw = [{"kv_events": kv_events_default, **r} if isinstance(r, dict) else r for r in replicas_raw]
    return ModelRoutingConfig(
        model=model,
        replicas=_parse_replicas(model, replicas_raw),
        policy=_build(PolicyConfig, policy_raw, f"models.{model}.routing"),
        health=_build(HealthConfig, raw.get("health"), f"models.{model}.health"),
        index=_build(IndexConfig, raw.get("index"), f"models.{model}.index"),
    )


def parse_models_config(models_config: Any) -> dict[str, ModelRoutingConfig]:
    if not isinstance(models_config, dict):
        raise RoutingConfigError("models: expected a mapping of model name -> {replicas, routing, health, index}")
    return {str(model): parse_model_config(str(model), raw) for model, raw in models_config.items()}
