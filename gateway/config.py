"""Gateway configuration: typed, validated once at start-up (`load_config`), errors that name the value and the fix.

YAML layout (config/gateway.yaml):

    host: 127.0.0.1
    port: 8000
    admin_token_env: SLUICEGATE_ADMIN_TOKEN   # the admin API's bearer token is read from this variable
    tenants_seed: config/tenants.yaml         # optional; created at start-up when missing
    redis: {url_env: REDIS_URL, failure_mode: fail_open, socket_timeout_s: 0.1, retry_interval_s: 1.0}
    num_instances: 1                          # gateway instances sharing one Redis (fail-open divides limits by it)
    admission_overlap: true                   # send upstream while the admission script runs, when safe
    access_log: true                          # one JSON line per request on stdout (gateway/access_log.py)
    upstream: {connect_timeout_s: 2, read_timeout_s: 120, max_connections: 1024, prefill_timeout_s: 30}
    router: gateway.simple_router:build_router  # "module:callable" (see below)
    models:
      tiny:
        tokenizer: models/tiny          # the model's HF folder (tokenizer.json + chat template)
        max_model_len: 4096
        replicas: [http://127.0.0.1:8100, {name: r1, url: "http://127.0.0.1:8101"}]   # {..., role: prefill|decode}
        routing: {...}                  # optional: handed to the router with `replicas`, `health`, `index`
        price: {input_usd_per_mtok: 0.5, output_usd_per_mtok: 1.5, cached_input_usd_per_mtok: 0.25}  # optional

The router factory is called as `factory(routing_models, metrics_registry=registry)` where routing_models maps each
model to {replicas: [{name, url, ...}], routing, health, index} (only the keys the YAML gave), so
`gateway.routing.factory:build_router` (prefix affinity) and `gateway.simple_router:build_router` (round robin)
are interchangeable by configuration.

Every class below is a schema (sluicegate/schema.py): types are strict (`block_size: 16.5` or `port: "8000"` is an
error), unknown keys are errors, and each field's docstring is its documentation.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import yaml
from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from gateway.routing.base import Role
from gateway.routing.config import RoleField
from gateway.routing.discovery.config import DiscoveryConfig, DiscoverySection, entries, name_prefixes
from gateway.store.redis_url import RedisEndpoint, TlsOptions, parse_redis_url
from gateway.store.spend import FREE, MAX_USD_PER_MTOK, NANO_PER_MICRO, Price, nano_usd_per_token
from sluicegate.schema import Host, Schema, explain
from sluicegate.yaml_files import load_yaml

FAIL_OPEN: Final = "fail_open"
FAIL_CLOSED: Final = "fail_closed"
MIN_REQUEST_LEASE_S = 120.0
"""settle.lua tells a resent settlement that already ran by its lease still having over a minute to go (a margin
for clock skew between gateways and Redis): a shorter lease would let resends apply twice."""
ROUTING_KEYS = ("routing", "health", "index")

Seconds = Annotated[float, Field(gt=0)]
Count = Annotated[int, Field(ge=1)]


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the field, the value and the fix."""


class ReplicaSpec(Schema):
    name: Annotated[str, Field(min_length=1)]
    """Stable replica name (metrics label, admin API key, debug header); a bare URL is named `<model>-<index>`."""
    url: str
    """Base URL of an OpenAI-compatible upstream, e.g. http://127.0.0.1:8100 (no trailing /v1)."""
    kv_events: bool | None = None
    """Whether it publishes GET /v1/kv/events; None: the model's `routing.kv_events` (default true)."""
    role: RoleField | None = None
    """prefill, decode or both (the replica's `sluicegate engine --kv-role`); None: both. A model with prefill
    replicas serves each request in two hops, prefill then decode (docs/architecture.md, "Disaggregated prefill and
    decode"), and needs the prefix router and at least one decode or both replica."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("needs an http(s):// url")
        return url.rstrip("/")


def _to_tenth_of_a_cent(usd_per_mtok: float) -> float:
    if abs(usd_per_mtok * NANO_PER_MICRO - nano_usd_per_token(usd_per_mtok)) > 1e-6:
        raise ValueError("prices are kept to $0.001 per million tokens; round it")
    return usd_per_mtok


UsdPerMtok = Annotated[float, Field(ge=0.0, le=MAX_USD_PER_MTOK), AfterValidator(_to_tenth_of_a_cent)]


class PriceConfig(Schema):
    """A model's price (gateway/store/spend.py): what its usage costs and what tenants' budgets in US dollars count."""

    input_usd_per_mtok: UsdPerMtok
    """US dollars per million prompt tokens."""
    output_usd_per_mtok: UsdPerMtok
    """US dollars per million completion tokens."""
    cached_input_usd_per_mtok: UsdPerMtok | None = None
    """US dollars per million prompt tokens served from the replica's prefix cache; None: the input price."""

    def per_token(self) -> Price:
        cached = self.input_usd_per_mtok if self.cached_input_usd_per_mtok is None else self.cached_input_usd_per_mtok
        return Price(
            nano_usd_per_token(self.input_usd_per_mtok),
            nano_usd_per_token(cached),
            nano_usd_per_token(self.output_usd_per_mtok),
        )


class ModelConfig(Schema):
    name: str
    """The model name clients send in `model` (its key under `models:`)."""
    replicas: list[ReplicaSpec] = []
    """The OpenAI-compatible upstreams serving it: base URLs or {name, url, kv_events, role} mappings (one URL alone
    is a list of one). At least one, unless `discovery` finds them."""
    discovery: DiscoverySection | None = None
    """Find the replicas at run time: DNS A/SRV records or a Kubernetes Service's EndpointSlices
    (gateway/routing/discovery/config.py); they join and leave without a restart. Needs the prefix router. One
    entry, or a list of entries with a `role` each (a disaggregated model's prefill and decode pools)."""
    tokenizer: str | None = None
    """Folder with tokenizer.json (+ chat template) for exact prompt token counts; None: count ~4 bytes a token."""
    block_size: Count = 16
    """Prefix-cache block size in tokens; must equal the replicas' (docs/architecture.md, "Block hashing"). Default:
    `index.block_size`, else 16."""
    max_model_len: Count | None = None
    """Context window in tokens; None: the tokenizer's model_max_length, or unchecked."""
    prefill_min_prompt_tokens: Annotated[int, Field(ge=0)] = 256
    """Models with prefill replicas: shorter prompts skip the prefill hop and a decode replica computes them (a
    short prefill slows its batch less than a second round trip and a queue behind long prompts slow the request);
    0 sends every prompt through a prefill replica. Needs `tokenizer` (without it every prompt takes the hop)."""
    upstream_model: str | None = None
    """The name the upstream knows this model by; None: the same name."""
    routing: dict[str, Any] | None = None
    """Router settings (policy and its knobs, kv_events); the router validates them (gateway/routing/config.py)."""
    health: dict[str, Any] | None = None
    """Replica probing and circuit breaking, for the router (gateway/routing/config.py)."""
    index: dict[str, Any] | None = None
    """Block hashing and the prefix index, for the router (gateway/routing/config.py)."""
    price: PriceConfig | None = None
    """Optional prices in USD per million tokens: usage is then also counted in money, and tenants' daily and
    monthly budgets in USD apply to this model; None: its tokens cost nothing."""

    @property
    def price_per_token(self) -> Price:
        return FREE if self.price is None else self.price.per_token()

    @model_validator(mode="before")
    @classmethod
    def _yaml_shorthands(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        replicas = data.get("replicas")
        if isinstance(replicas, str):
            replicas = [replicas]
        if isinstance(replicas, list):  # a bare URL is named after the model and its position
            data["replicas"] = [
                {"name": f"{data.get('name')}-{i}", "url": r} if isinstance(r, str) else r
                for i, r in enumerate(replicas)
            ]
        index = data.get("index")
        if "block_size" not in data and isinstance(index, dict) and "block_size" in index:
            data["block_size"] = index["block_size"]
        return data

    @property
    def discovery_entries(self) -> list[DiscoveryConfig]:
        """The entries of `discovery`, one or several (none without it)."""
        return entries(self.discovery)

    @model_validator(mode="after")
    def _some_replicas(self) -> ModelConfig:
        if not self.replicas and self.discovery is None:
            raise ValueError(f"give models.{self.name}.replicas (at least one) or models.{self.name}.discovery")
        found = self.discovery_entries
        roles = {r.role or Role.BOTH for r in self.replicas} | {entry.role for entry in found}
        if Role.PREFILL in roles and not roles & {Role.DECODE, Role.BOTH}:
            at = f"models.{self.name}.replicas"
            if not any(r.role == Role.PREFILL for r in self.replicas):  # the prefill pool is a discovered one
                first = next(i for i, entry in enumerate(found) if entry.role == Role.PREFILL)
                at = f"models.{self.name}.discovery" + (f"[{first}]" if len(found) > 1 else "") + ".role"
            raise ValueError(
                f"{at}: prefill replicas hand their KV to decode replicas; give at least one replica of role decode "
                "(or both), listed or discovered"
            )
        prefixes = name_prefixes(found)
        for i, prefix in enumerate(prefixes):
            if prefix and prefix in prefixes[:i]:
                raise ValueError(
                    f"models.{self.name}.discovery[{i}].prefix: entries {prefixes.index(prefix)} and {i} would both "
                    f"name their replicas {prefix}-...; give each entry a distinct `prefix`"
                )
        return self

    @field_validator("tokenizer")
    @classmethod
    def _folder(cls, tokenizer: str | None) -> str | None:
        if tokenizer is not None and not Path(tokenizer).is_dir():
            raise ValueError(f"{tokenizer!r} is not a folder (want the model's HF folder)")
        if tokenizer is not None and not (Path(tokenizer) / "tokenizer.json").is_file():  # else a start-up traceback
            raise ValueError(f"{tokenizer!r} has no tokenizer.json (want a fast, Rust tokenizer's folder)")
        return tokenizer

    def routing_view(self) -> dict[str, Any]:
        """What the router factory gets for this model: {replicas: [{name, url, ...}], routing, health, index}."""
        view: dict[str, Any] = {"replicas": [r.model_dump(exclude_none=True) for r in self.replicas]}
        view.update({key: getattr(self, key) for key in ROUTING_KEYS if getattr(self, key) is not None})
        return view


class RedisTlsConfig(Schema):
    """The certificate files of a rediss:// URL (gateway/store/redis_url.py); the URL's ssl_* parameters win."""

    ca_file: str | None = None
    """PEM bundle of the CAs that sign Redis' certificate; None: the system's trust store."""
    cert_file: str | None = None
    """Client certificate (PEM), for a Redis with `tls-auth-clients yes`."""
    key_file: str | None = None
    """The client certificate's private key (PEM); None: it is in cert_file."""
    cert_reqs: Literal["required", "optional", "none"] = "required"
    """required: verify Redis' certificate and host name; optional: the certificate only; none: no verification."""


class RedisConfig(Schema):
    url: str | None = None
    """redis://[user:password@]host:port/db, rediss://... (TLS, see `tls`) or unix://[user:password@]/path?db=N;
    a Redis Cluster: redis+cluster://host:port[,host:port...] (rediss+cluster:// for TLS); Sentinel:
    redis+sentinel://host:port[,host:port...]/<master-name> (gateway/store/redis_url.py);
    None runs the in-process store (single instance). Any other scheme is refused at start-up."""
    tls: RedisTlsConfig = RedisTlsConfig()
    """Certificate files for a rediss:// URL."""
    pool_max_connections: Count = 64
    """redis-py's connections per gateway process (key and tenant reads, admin calls; the two hot-path scripts
    share one pipelined connection of their own)."""
    pool_timeout_s: Seconds = 1.0
    """How long a call waits for a free pooled connection; running out is this gateway's overload, not an outage."""
    lease_heartbeat_s: Annotated[float, Field(ge=0)] = 10.0
    """A gateway process renews its concurrency leases' owner deadline every third of this; a process that died
    (SIGKILL, OOM) frees its tenants' max_concurrent slots this long after (gateway/store/leases.py). 0: they stay
    held until request_lease_s ends."""
    url_env: str = "REDIS_URL"
    """Environment variable holding the URL when `url` is not given."""
    key_prefix: str = "sg:"
    """Prefix of every key the gateway writes; tenant keys add a `{t:<tenant>}` hash tag after it."""
    failure_mode: Literal["fail_open", "fail_closed"] = FAIL_OPEN
    """fail_open: local buckets at limits / num_instances while Redis is down; fail_closed: answer 503."""
    socket_timeout_s: Seconds = 0.1
    """Bound on every Redis call, so an unreachable or slow Redis never hangs a request."""
    retry_interval_s: Seconds = 1.0
    """After a failure, requests skip Redis for this long, then one probes it again (automatic recovery)."""

    @model_validator(mode="before")
    @classmethod
    def _url_from_env(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("url"):
            data = {**data, "url": os.environ.get(data.get("url_env") or "REDIS_URL") or None}
        if isinstance(data, dict) and data.get("tls", "") is None:  # an empty YAML section: the defaults
            data = {k: v for k, v in data.items() if k != "tls"}
        return data

    @field_validator("url")
    @classmethod
    def _usable_url(cls, url: str | None) -> str | None:
        """The URL both Redis clients will use (scheme, port, db, its TLS parameters), checked now rather than
        found unusable on every connection later (which would look like an outage)."""
        if url is not None:
            parse_redis_url(url)
        return url

    @model_validator(mode="after")
    def _usable_tls_files(self) -> RedisConfig:
        if self.url is not None:
            self.endpoint()
        return self

    def endpoint(self) -> RedisEndpoint:
        """The parsed URL with this section's TLS files: what both Redis clients connect with."""
        assert self.url is not None  # callers check: no URL means the in-process store
        tls = TlsOptions(self.tls.ca_file, self.tls.cert_file, self.tls.key_file, self.tls.cert_reqs)
        return parse_redis_url(self.url, tls)


class UpstreamConfig(Schema):
    connect_timeout_s: Seconds = 2.0
    """Bound on opening a connection to a replica."""
    read_timeout_s: Seconds = 120.0
    """Longest silence from the upstream (waiting for its headers, or between two chunks): 504 before the first
    byte, an error event mid-stream."""
    max_connections: Count = 1024
    """Pooled connections per upstream."""
    prefill_timeout_s: Seconds = 30.0
    """Bound on one try of a disaggregated request's prefill hop, from sending it to its whole answer; a try that
    runs past it is retried once on another prefill replica, then the decode replica prefills the prompt itself
    (docs/architecture.md, "Disaggregated prefill and decode")."""


class GatewayConfig(Schema):
    models: Annotated[dict[str, ModelConfig], Field(min_length=1)]
    """The models served: name -> {replicas, tokenizer, ...}; at least one."""
    host: Host = "127.0.0.1"
    """Address to listen on; 0.0.0.0 to serve other machines."""
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    """TCP port to listen on."""
    admin_token: str | None = None
    """Bearer token of the admin API; None disables the admin API. Better kept out of the file: admin_token_env."""
    admin_token_env: str = "SLUICEGATE_ADMIN_TOKEN"
    """Environment variable holding the admin token when `admin_token` is not given."""
    tenants_seed: str | None = None
    """YAML file of tenants and keys created at start-up when missing (gateway/admin/seed.py)."""
    redis: RedisConfig = Field(default_factory=RedisConfig)  # a factory: the URL variable is read at load time
    """The shared store of buckets, tenants and keys."""
    upstream: UpstreamConfig = UpstreamConfig()
    """Connections to the replicas."""
    num_instances: Count = 1
    """Gateway instances sharing one Redis (fail-open divides limits by it)."""
    router: str = "gateway.simple_router:build_router"
    """The router factory, "module:callable" (see above)."""
    otlp_endpoint: str | None = None
    """OTLP/HTTP trace collector (http://otel-collector:4318); None: the OTEL_EXPORTER_OTLP_* variables, else off."""
    trace_sample_ratio: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    """Fraction of requests traced."""
    debug_headers: bool = False
    """Answer with x-sluicegate-replica (the chosen replica) and x-sluicegate-prefix-tokens (the prefix tokens the
    router believed it held): routing made visible per request. Off by default: it names internal hosts."""
    workers: Count = 1
    """Worker processes serving this config (`sluicegate gateway --workers`); set by the command, not the file."""
    request_lease_s: Annotated[float, Field(ge=MIN_REQUEST_LEASE_S)] = 900.0
    """A request counts against max_concurrent at most this long, so a crashed gateway cannot leak slots (at least
    MIN_REQUEST_LEASE_S)."""
    admission_overlap: bool = True
    """Send a request upstream while its admission script runs when the key has ample headroom
    (gateway/request/overlap.py); False: always admit first."""
    drain_timeout_s: Annotated[int, Field(ge=1, le=3600)] = 30
    """On SIGTERM or SIGINT: stop accepting connections and let requests in flight finish this long; a stream still
    open then ends with a 503 error event (the engine's --drain-timeout-s, whose default this is)."""
    access_log: bool = True
    """One JSON line per completion request on stdout (logger `sluicegate.access`, gateway/access_log.py): who, which
    model and replica, status, tokens, timings, never the text. False: none."""
    guardrails: dict[Literal["engine", "policies"], dict[str, Any] | None] | None = None
    """{engine: GuardrailsConfig fields, policies: {name: GuardrailPolicy fields}}; None: guardrails off."""

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, data: Any) -> Any:
        """Each model learns its name (its key), and the admin token comes from the environment when not given."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for section in ("redis", "upstream"):  # an empty YAML section (`redis:`) means the defaults
            if section in data and data[section] is None:
                del data[section]
        if not data.get("admin_token"):
            data["admin_token"] = os.environ.get(data.get("admin_token_env") or "SLUICEGATE_ADMIN_TOKEN") or None
        if isinstance(data.get("models"), dict):
            data["models"] = {
                str(name): {**model, "name": str(name)} if isinstance(model, dict) else model
                for name, model in data["models"].items()
            }
        return data

    @field_validator("router")
    @classmethod
    def _module_callable(cls, router: str) -> str:
        if not re.fullmatch(r"[\w.]+:\w+", router):
            raise ValueError("want 'module:callable', e.g. gateway.routing.factory:build_router")
        return router

    @property
    def discovery_models(self) -> dict[str, list[DiscoveryConfig]]:
        """The models whose replicas are discovered at run time, and how: one entry per pool found on its own."""
        return {name: model.discovery_entries for name, model in self.models.items() if model.discovery is not None}

    @property
    def routing_models(self) -> dict[str, dict[str, Any]]:
        """What the router factory gets: per model {replicas: [{name, url, ...}], routing, health, index}."""
        return {name: model.routing_view() for name, model in self.models.items()}


def config_from_dict(raw: Any) -> GatewayConfig:
    try:
        return GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(explain(exc)) from None


def load_config(path: str | Path) -> GatewayConfig:
    try:
        raw = load_yaml(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"gateway config {str(path)!r} not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"gateway config {str(path)!r} is not valid YAML: {exc}") from None
    return config_from_dict(raw or {})
