"""Gateway configuration: typed, validated once at start-up (`load_config`), errors that name the value and the fix.

YAML layout (config/gateway.yaml):

    host: 127.0.0.1
    port: 8000
    admin_token_env: SLUICEGATE_ADMIN_TOKEN   # the admin API's bearer token is read from this variable
    tenants_seed: config/tenants.yaml         # optional; created at start-up when missing
    redis: {url_env: REDIS_URL, failure_mode: fail_open, socket_timeout_s: 0.1, retry_interval_s: 1.0}
    num_instances: 1                          # gateway instances sharing one Redis (fail-open divides limits by it)
    admission_overlap: true                   # send upstream while the admission script runs, when safe
    upstream: {connect_timeout_s: 2, read_timeout_s: 120, max_connections: 1024}
    router: gateway.simple_router:build_router  # "module:callable" (see below)
    models:
      tiny:
        tokenizer: models/tiny          # the model's HF folder (tokenizer.json + chat template)
        max_model_len: 4096
        replicas: [http://127.0.0.1:8100, {name: r1, url: "http://127.0.0.1:8101"}]
        routing: {...}                  # optional: handed to the router with `replicas`, `health`, `index`

The router factory is called as `factory(routing_models, metrics_registry=registry)` where routing_models maps each
model to {replicas: [{name, url, ...}], routing, health, index} (only the keys the YAML gave), so
`gateway.routing.factory:build_router` (prefix affinity) and `gateway.simple_router:build_router` (round robin)
are interchangeable by configuration.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

FAIL_OPEN = "fail_open"
FAIL_CLOSED = "fail_closed"


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the field, the value and the fix."""


@dataclass(frozen=True)
class ModelConfig:
    name: str
    """The model name clients send in `model`."""
    replicas: tuple[tuple[str, str], ...]
    """(name, base URL) of the OpenAI-compatible upstreams serving it, e.g. ("tiny-0", "http://127.0.0.1:8100")."""
    tokenizer: str | None = None
    """Folder with tokenizer.json (+ chat template) for exact prompt token counts; None: count ~4 bytes a token."""
    block_size: int = 16
    """Prefix-cache block size in tokens; must equal the replicas' (DESIGN.md, "Block hashing")."""
    max_model_len: int | None = None
    """Context window in tokens; None: the tokenizer's model_max_length, or unchecked."""
    upstream_model: str | None = None
    """The name the upstream knows this model by; None: the same name."""


@dataclass(frozen=True)
class RedisConfig:
    url: str | None = None
    """redis://host:port/db; None runs the in-process store (single instance)."""
    key_prefix: str = "sg:"
    """Prefix of every key the gateway writes; tenant keys add a `{t:<tenant>}` hash tag after it."""
    failure_mode: str = FAIL_OPEN
    """fail_open: local buckets at limits / num_instances while Redis is down; fail_closed: answer 503."""
    socket_timeout_s: float = 0.1
    """Bound on every Redis call, so an unreachable or slow Redis never hangs a request."""
    retry_interval_s: float = 1.0
    """After a failure, requests skip Redis for this long, then one probes it again (automatic recovery)."""


@dataclass(frozen=True)
class UpstreamConfig:
    connect_timeout_s: float = 2.0
    read_timeout_s: float = 120.0
    """Longest silence from the upstream (waiting for its headers, or between two chunks): 504 before the first
    byte, an error event mid-stream."""
    max_connections: int = 1024
    """Pooled connections per upstream."""


@dataclass(frozen=True)
class GatewayConfig:
    models: dict[str, ModelConfig]
    host: str = "127.0.0.1"
    port: int = 8000
    admin_token: str | None = None
    """Bearer token of the admin API; None disables the admin API."""
    tenants_seed: str | None = None
    redis: RedisConfig = field(default_factory=RedisConfig)
    upstream: UpstreamConfig = field(default_factory=UpstreamConfig)
    num_instances: int = 1
    router: str = "gateway.simple_router:build_router"
    routing_models: dict = field(default_factory=dict)
    """What the router factory gets: per model {replicas: [{name, url, ...}], routing, health, index}."""
    otlp_endpoint: str | None = None
    """OTLP/HTTP trace collector (http://otel-collector:4318); None: the OTEL_EXPORTER_OTLP_* variables, else off."""
    trace_sample_ratio: float = 1.0
    debug_headers: bool = False
    """Answer with x-sluicegate-replica (the chosen replica) and x-sluicegate-prefix-tokens (the prefix tokens the
    router believed it held): routing made visible per request. Off by default: it names internal hosts."""
    workers: int = 1
    """Worker processes serving this config (`sluicegate gateway --workers`); set by the command, not the file."""
    request_lease_s: float = 900.0
    """A request counts against max_concurrent at most this long, so a crashed gateway cannot leak slots (at least
    MIN_REQUEST_LEASE_S)."""
    admission_overlap: bool = True
    """Send a request upstream while its admission script runs when the key has ample headroom
    (gateway/overlap.py); False: always admit first."""
    guardrails: dict | None = None
    """{engine: GuardrailsConfig fields, policies: {name: GuardrailPolicy fields}}; None: guardrails off."""


MIN_REQUEST_LEASE_S = 120.0
"""settle.lua tells a resent settlement that already ran by its lease still having over a minute to go (a margin
for clock skew between gateways and Redis): a shorter lease would let resends apply twice."""


def _at_least(name: str, value: Any, minimum: float) -> float:
    value = _positive(name, value)
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum:g} s, got {value!r}")
    return value


def _positive(name: str, value: Any, kind: type = float) -> Any:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{name} must be a positive number, got {value!r}")
    return kind(value)


ROUTING_KEYS = ("routing", "health", "index")
GATEWAY_MODEL_KEYS = ("replicas", "tokenizer", "block_size", "max_model_len", "upstream_model", *ROUTING_KEYS)


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    return value


def _replicas(name: str, raw) -> list[dict]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"models.{name}.replicas must list base URLs or {{name, url}} mappings, got {raw!r}")
    out = []
    for i, item in enumerate(raw):
        replica = {"name": f"{name}-{i}", "url": item} if isinstance(item, str) else item
        url = replica.get("url") if isinstance(replica, dict) else None
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"models.{name}.replicas[{i}] needs an http(s):// url, got {item!r}")
        out.append({**replica, "url": url.rstrip("/")})
    return out


def _model(name: str, raw: dict) -> tuple[ModelConfig, dict]:
    if not isinstance(raw, dict):
        raise ConfigError(f"models.{name} must be a mapping with `replicas`, got {raw!r}")
    unknown = sorted(set(raw) - set(GATEWAY_MODEL_KEYS))
    if unknown:
        raise ConfigError(f"models.{name}: unknown keys {unknown}; known: {sorted(GATEWAY_MODEL_KEYS)}")
    replicas = _replicas(name, raw.get("replicas"))
    tokenizer = raw.get("tokenizer")
    if tokenizer is not None and not Path(tokenizer).is_dir():
        raise ConfigError(f"models.{name}.tokenizer: {tokenizer!r} is not a folder (want the model's HF folder)")
    max_len = raw.get("max_model_len")
    index = raw.get("index") if isinstance(raw.get("index"), dict) else {}
    model = ModelConfig(
        name=name,
        replicas=tuple((r["name"], r["url"]) for r in replicas),
        tokenizer=tokenizer,
        block_size=_positive(f"models.{name}.block_size", raw.get("block_size", index.get("block_size", 16)), int),
        max_model_len=None if max_len is None else _positive(f"models.{name}.max_model_len", max_len, int),
        upstream_model=raw.get("upstream_model"),
    )
    routing = {"replicas": replicas, **{k: raw[k] for k in ROUTING_KEYS if k in raw}}
    return model, routing


def _redis(raw: dict) -> RedisConfig:
    url = raw.get("url") or os.environ.get(raw.get("url_env", "REDIS_URL")) or None
    mode = raw.get("failure_mode", FAIL_OPEN)
    if mode not in (FAIL_OPEN, FAIL_CLOSED):
        raise ConfigError(f"redis.failure_mode must be {FAIL_OPEN!r} or {FAIL_CLOSED!r}, got {mode!r}")
    return RedisConfig(
        url=url,
        key_prefix=str(raw.get("key_prefix", "sg:")),
        failure_mode=mode,
        socket_timeout_s=_positive("redis.socket_timeout_s", raw.get("socket_timeout_s", 0.1)),
        retry_interval_s=_positive("redis.retry_interval_s", raw.get("retry_interval_s", 1.0)),
    )


def _upstream(raw: dict) -> UpstreamConfig:
    defaults = UpstreamConfig()
    return UpstreamConfig(
        connect_timeout_s=_positive("upstream.connect_timeout_s",
                                    raw.get("connect_timeout_s", defaults.connect_timeout_s)),
        read_timeout_s=_positive("upstream.read_timeout_s", raw.get("read_timeout_s", defaults.read_timeout_s)),
        max_connections=_positive("upstream.max_connections",
                                  raw.get("max_connections", defaults.max_connections), int),
    )


def config_from_dict(raw: dict) -> GatewayConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"the gateway config must be a mapping, got {type(raw).__name__}")
    models_raw = raw.get("models") or {}
    if not isinstance(models_raw, dict) or not models_raw:
        raise ConfigError("`models` must map at least one model name to {replicas: [...], tokenizer: DIR}")
    token = raw.get("admin_token") or os.environ.get(raw.get("admin_token_env", "SLUICEGATE_ADMIN_TOKEN")) or None
    parsed = {str(name): _model(str(name), m) for name, m in models_raw.items()}
    return GatewayConfig(
        models={name: model for name, (model, _) in parsed.items()},
        routing_models={name: routing for name, (_, routing) in parsed.items()},
        host=str(raw.get("host", "127.0.0.1")),
        port=int(raw.get("port", 8000)),
        admin_token=token,
        tenants_seed=raw.get("tenants_seed"),
        redis=_redis(raw.get("redis") or {}),
        upstream=_upstream(raw.get("upstream") or {}),
        num_instances=_positive("num_instances", raw.get("num_instances", 1), int),
        router=str(raw.get("router", "gateway.simple_router:build_router")),
        request_lease_s=_at_least("request_lease_s", raw.get("request_lease_s", 900.0), MIN_REQUEST_LEASE_S),
        admission_overlap=_bool("admission_overlap", raw.get("admission_overlap", True)),
        debug_headers=_bool("debug_headers", raw.get("debug_headers", False)),
        otlp_endpoint=raw.get("otlp_endpoint"),
        trace_sample_ratio=float(raw.get("trace_sample_ratio", 1.0)),
        guardrails=_guardrails(raw.get("guardrails")),
    )


def _guardrails(raw) -> dict | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not set(raw) <= {"engine", "policies"}:
        raise ConfigError(f"guardrails must be a mapping with `engine` and `policies`, got {raw!r}")
    if not isinstance(raw.get("policies") or {}, dict):
        raise ConfigError("guardrails.policies must map policy names to policy settings")
    return raw


def load_config(path: str | Path) -> GatewayConfig:
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"gateway config {str(path)!r} not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"gateway config {str(path)!r} is not valid YAML: {exc}") from None
    return config_from_dict(raw or {})
