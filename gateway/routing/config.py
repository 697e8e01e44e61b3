"""Routing configuration per model: typed, validated once, errors that name the value and the fix.

`parse_models_config` turns the `models:` mapping of the gateway YAML (factory.py documents its shape) into one
`ModelRoutingConfig` per model.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator, model_validator

from gateway.routing.base import Role
from sluicegate.block_hash import DEFAULT_BLOCK_SIZE
from sluicegate.schema import Schema, explain

POLICY_NAMES = (
    "round_robin",
    "least_loaded",
    "consistent_hash",
    "prefix_affinity",
    "expected_ttft",
    "sglang_cache_aware",
)

RoleField = Annotated[Role, Field(strict=False)]
"""A replica's role as YAML and JSON give it (a string; strict mode would take only the enum)."""


class RoutingConfigError(ValueError):
    """The routing section of the config is wrong; the message names the value and the fix."""


class ReplicaConfig(Schema):
    name: Annotated[str, Field(min_length=1)]
    """Stable replica name (metrics label, admin API key, debug header)."""
    url: str
    """Base URL, e.g. http://10.0.0.5:8100 (no trailing /v1)."""
    kv_events: bool = True
    """Subscribe to GET /v1/kv/events for a precise prefix index; False for upstreams without a feed (vLLM, others)."""
    role: RoleField = Role.BOTH
    """prefill, decode or both (its `sluicegate engine --kv-role`): a model with prefill replicas serves each request
    in two hops, prefill then decode (docs/architecture.md, "Disaggregated prefill and decode")."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("use http://host:port or https://...")
        return url.rstrip("/")


class PolicyConfig(Schema):
    """Knobs of every policy; each policy reads its own (expected_ttft.py and prefix_affinity.py explain theirs)."""

    name: str = Field(default="expected_ttft", alias="policy")
    """round_robin, least_loaded, consistent_hash, prefix_affinity, expected_ttft (the default: lowest TTFT in
    `sluicegate bench routing`) or sglang_cache_aware (SGLang router's rule, to compare with on one's own traffic)."""
    hit_weight: Annotated[float, Field(ge=0)] = 4.0
    """expected_ttft: tokens of queue a cached prompt token is worth beyond the prefill it saves (>= 0)."""
    max_load_ratio: Annotated[float, Field(ge=1.0)] = 1.25
    """Load bound: no replica gets a request that would put its in-flight count above
    ceil(max_load_ratio * (total in-flight + 1) / healthy replicas). consistent_hash and prefix_affinity."""
    max_load_slack_requests: Annotated[int, Field(ge=0)] = 8
    """Requests a replica may exceed the ratio bound by, so the integer bound does not scatter prefixes at low load."""
    load_weight: Annotated[float, Field(ge=0)] = 0.02
    """prefix_affinity: prompt tokens the score gives up per token of replica load (prefix_affinity.py says why
    it is small: in-flight prompt tokens include requests long past their prefill)."""
    decode_token_weight: Annotated[float, Field(ge=0)] = 0.1
    """prefix_affinity: load tokens per in-flight decode token (a decode token costs far less than a prefill one)."""
    waiting_request_tokens: Annotated[float, Field(ge=0)] = 512.0
    """prefix_affinity and the decode hop: load tokens per request waiting in the replica's own queue
    (vllm:num_requests_waiting)."""
    kv_usage_tokens: Annotated[float, Field(ge=0)] = 2048.0
    """prefix_affinity and the decode hop: load tokens at 100% KV usage (vllm:kv_cache_usage_perc), scaled
    linearly."""
    hash_key_blocks: Annotated[int, Field(ge=1)] = 4
    """consistent_hash: the request's key is the hash of its first min(n, hash_key_blocks) blocks."""
    virtual_nodes: Annotated[int, Field(ge=1)] = 64
    """consistent_hash: ring points per replica."""

    @field_validator("name")
    @classmethod
    def _known_policy(cls, name: str) -> str:
        if name not in POLICY_NAMES:  # a tuple, not a Literal: policies/ adds names to it
            raise ValueError(f"use one of {POLICY_NAMES}")
        return name


class HealthConfig(Schema):
    interval_s: Annotated[float, Field(gt=0)] = 2.0
    """Period of GET /health and GET /metrics per replica."""
    timeout_s: Annotated[float, Field(gt=0)] = 1.0
    """Timeout of one probe; a slower answer counts as a failure."""
    unhealthy_after: Annotated[int, Field(ge=1)] = 2
    """Consecutive failed probes that mark a replica down."""
    healthy_after: Annotated[int, Field(ge=1)] = 1
    """Consecutive good probes that bring it back."""
    breaker_failures: Annotated[int, Field(ge=1)] = 3
    """Consecutive failed requests (errors, timeouts) that open the replica's circuit breaker."""
    breaker_open_s: Annotated[float, Field(gt=0)] = 5.0
    """How long an open breaker refuses requests before letting one trial request through (half-open)."""


class IndexConfig(Schema):
    block_size: Annotated[int, Field(ge=1)] = DEFAULT_BLOCK_SIZE
    """Tokens per block of the request path's hashes; a replica's snapshot may announce another size."""
    chars_per_block: Annotated[int, Field(ge=1)] = 64
    """Characters per block for character-based hashing (no token ids: the model's tokenizer is unknown)."""
    history_ttl_s: Annotated[float, Field(gt=0)] = 300.0
    """Approximate index: how long a routed prefix is believed to stay cached on a replica without a feed."""
    history_max_blocks: Annotated[int, Field(ge=1)] = 1_000_000
    """Approximate index: most (replica, block) entries kept; the least recently routed go first."""
    resync_backoff_s: Annotated[float, Field(gt=0)] = 0.5
    """KV-events feed: first reconnect delay (doubles up to 10 s while the replica stays unreachable)."""


class ModelRoutingConfig(Schema):
    model: str
    """The model name clients send."""
    replicas: list[ReplicaConfig] = []
    """The upstreams serving it; the admin API adds and removes some at run time."""
    policy: PolicyConfig = Field(default=PolicyConfig(), alias="routing")  # frozen: one default instance is safe
    """How a replica is chosen (YAML `routing:`)."""
    health: HealthConfig = Field(default_factory=HealthConfig)
    """Probing and circuit breaking."""
    index: IndexConfig = Field(default_factory=IndexConfig)
    """Block hashing and the prefix index."""

    @model_validator(mode="after")
    def _unique_replica_names(self) -> ModelRoutingConfig:
        names = [r.name for r in self.replicas]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"model {self.model!r}: replica names {duplicates} appear more than once")
        return self


def replica_config(**raw: Any) -> ReplicaConfig:
    """One replica (the admin API adds them at run time); RoutingConfigError names the bad value."""
    try:
        return ReplicaConfig.model_validate(raw)
    except ValidationError as exc:
        raise RoutingConfigError(explain(exc)) from None


def parse_model_config(model: str, raw: Any) -> ModelRoutingConfig:
    try:
        return ModelRoutingConfig.model_validate(_yaml_shape(model, raw))
    except ValidationError as exc:
        raise RoutingConfigError(explain(exc, f"models.{model}")) from None


def _yaml_shape(model: str, raw: Any) -> Any:
    """The YAML's `models.<name>` mapping as ModelRoutingConfig's input: the name added, empty sections dropped, and
    `routing.kv_events` (a pool-wide default in the YAML) moved onto each replica that does not say."""
    if not isinstance(raw, dict):
        return raw
    shaped = {"model": model, **{key: value for key, value in raw.items() if value is not None}}
    routing = shaped.get("routing")
    if isinstance(routing, dict) and "kv_events" in routing:
        shaped["routing"] = {key: value for key, value in routing.items() if key != "kv_events"}
        if isinstance(shaped.get("replicas"), list):
            shaped["replicas"] = [
                {"kv_events": routing["kv_events"], **r} if isinstance(r, dict) else r for r in shaped["replicas"]
            ]
    return shaped


def parse_models_config(models_config: Any) -> dict[str, ModelRoutingConfig]:
    if not isinstance(models_config, dict):
        raise RoutingConfigError("models: expected a mapping of model name -> {replicas, routing, health, index}")
    return {str(model): parse_model_config(str(model), raw) for model, raw in models_config.items()}
