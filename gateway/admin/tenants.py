"""Tenants and API keys: the records the admin API edits and the admission script reads.

A limit of 0 means unlimited. Keys are shown once at creation and stored only as sha256 hex digests; a key's
public id is `k_` + the first 12 hex digits of its digest (enough to name it, useless to forge it).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields

from gateway.errors import invalid_request

TENANT_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
KEY_PREFIX = "sk-sg-"
GUARDRAILS_OFF = "off"

# Tenant and key limits, in the order the admission script reads them.
BUCKET_LIMITS = ("rpm", "input_tpm", "output_tpm")


@dataclass
class Tenant:
    id: str
    rpm: int = 0
    """Requests per minute (bucket capacity = one minute's allowance, continuous refill)."""
    input_tpm: int = 0
    """Prompt tokens per minute."""
    output_tpm: int = 0
    """Completion tokens per minute; admission reserves max_tokens (or default_max_tokens), settlement reconciles."""
    max_concurrent: int = 0
    daily_tokens: int = 0
    """Prompt + completion tokens per UTC day."""
    monthly_tokens: int = 0
    default_max_tokens: int = 256
    """Output reservation for requests that do not set max_tokens."""
    guardrails: str = GUARDRAILS_OFF
    """Guardrail policy name (applied by the guardrails hook)."""
    isolate_cache: bool = False
    """Salt this tenant's prefix hashes with its id so its prompts never share KV blocks with other tenants."""
    models: list[str] = field(default_factory=list)
    """Allowed models; empty allows every served model."""
    gen: int = 0
    """Bumped on every change; the admission script returns it so gateways refresh their cached copy."""

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    @property
    def cache_salt(self) -> str:
        return self.id if self.isolate_cache else ""

    def to_public(self) -> dict:
        return asdict(self)


@dataclass
class ApiKey:
    key_id: str
    tenant_id: str
    digest: str
    name: str = ""
    created_at: float = 0.0
    expires_at: float = 0.0
    """Unix seconds; 0 never expires."""
    revoked: bool = False
    rpm: int = 0
    """Optional tighter per-key limits (0: only the tenant's apply)."""
    input_tpm: int = 0
    output_tpm: int = 0

    def to_public(self) -> dict:
        public = asdict(self)
        del public["digest"]
        return public


TENANT_INT_FIELDS = ("rpm", "input_tpm", "output_tpm", "max_concurrent", "daily_tokens", "monthly_tokens",
                     "default_max_tokens")
KEY_INT_FIELDS = ("rpm", "input_tpm", "output_tpm")


def digest_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def key_id_of(digest: str) -> str:
    return "k_" + digest[:12]


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


MAX_LIMIT = 2**48
"""Largest limit the admin API takes: the Lua scripts do integer arithmetic in doubles (exact below 2**53) and
Redis' HINCRBY takes 64-bit integers."""
MAX_UNIX_S = 1e11
"""Latest key expiry (year 5138): finite, so Redis and the scripts can read it back."""


def _limit(name: str, value, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_LIMIT:
        raise invalid_request(f"{name} must be an integer from {minimum} to {MAX_LIMIT}, got {value!r}", param=name)
    return value


def policy_name_check(hooks) -> Callable[[str], None]:
    """What a tenant's `guardrails` name must pass: the hooks' own check (GuardrailHooks.check_policy_name raises a
    ValueError naming the defined policies); hooks without one (guardrails off) define no policy but "off"."""
    return getattr(hooks, "check_policy_name", None) or _only_off


def _only_off(name: str) -> None:
    if name != GUARDRAILS_OFF:
        raise ValueError(f"guardrail policy {name!r} is not defined: this gateway runs without guardrails "
                         f"(no `guardrails` section in its config); use {GUARDRAILS_OFF!r}")


def _policy_name(value, check_policy: Callable[[str], None]) -> str:
    if not isinstance(value, str):
        raise invalid_request(f"guardrails must be a policy name, got {value!r}", param="guardrails")
    try:
        check_policy(value)
    except ValueError as exc:  # a name the gateway does not define would fail every request of the tenant
        raise invalid_request(str(exc), param="guardrails", code="guardrail_policy_unknown") from None
    return value


def apply_tenant_fields(tenant: Tenant, updates: dict, check_policy: Callable[[str], None]) -> Tenant:
    """Validate and apply an admin update (unknown fields are a 400, not silently ignored); `check_policy` (from
    policy_name_check) raises ValueError for a guardrail policy name the gateway does not define."""
    known = {f.name for f in fields(Tenant)} - {"id", "gen"}
    for name, value in updates.items():
        if name not in known:
            raise invalid_request(f"unknown tenant field {name!r}; known: {sorted(known)}", param=name)
        if name in TENANT_INT_FIELDS:  # a default reservation of 0 would let unbounded outputs through unreserved
            value = _limit(name, value, minimum=1 if name == "default_max_tokens" else 0)
        elif name == "isolate_cache":
            if not isinstance(value, bool):
                raise invalid_request(f"isolate_cache must be true or false, got {value!r}", param=name)
        elif name == "models":
            if not isinstance(value, list) or not all(isinstance(m, str) and m and "," not in m for m in value):
                raise invalid_request(f"models must be a list of model names, got {value!r}", param=name)
        elif name == "guardrails":
            value = _policy_name(value, check_policy)
        setattr(tenant, name, value)
    return tenant


def apply_key_fields(key: ApiKey, updates: dict) -> ApiKey:
    known = {"name", "expires_at", *KEY_INT_FIELDS}
    for name, value in updates.items():
        if name not in known:
            raise invalid_request(f"unknown key field {name!r}; known: {sorted(known)}", param=name)
        if name in KEY_INT_FIELDS:
            value = _limit(name, value)
        elif name == "expires_at":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_UNIX_S:
                raise invalid_request(f"expires_at must be unix seconds up to {MAX_UNIX_S} (0: never), got {value!r}",
                                      param=name)
            value = float(value)
        elif not isinstance(value, str):
            raise invalid_request(f"name must be a string, got {value!r}", param=name)
        setattr(key, name, value)
    return key


def validate_tenant_id(tenant_id) -> str:
    # "." and ".." would be path segments clients normalise away: such a tenant could never be read or deleted.
    if not isinstance(tenant_id, str) or not TENANT_ID_RE.match(tenant_id) or tenant_id in (".", ".."):
        raise invalid_request(f"tenant id must match {TENANT_ID_RE.pattern} and not be '.' or '..', got "
                              f"{tenant_id!r}", param="id")
    return tenant_id


# Flat string maps, the shape of a Redis hash.
def tenant_to_hash(tenant: Tenant) -> dict[str, str]:
    out = {name: str(getattr(tenant, name)) for name in TENANT_INT_FIELDS}
    out.update(guardrails=tenant.guardrails, isolate_cache="1" if tenant.isolate_cache else "0",
               models=",".join(tenant.models), gen=str(tenant.gen), id=tenant.id)
    return out


def tenant_from_hash(raw: dict[str, str]) -> Tenant:
    tenant = Tenant(id=raw["id"], guardrails=raw.get("guardrails", GUARDRAILS_OFF),
                    isolate_cache=raw.get("isolate_cache") == "1",
                    models=[m for m in raw.get("models", "").split(",") if m], gen=int(raw.get("gen", 0)))
    for name in TENANT_INT_FIELDS:
        setattr(tenant, name, int(raw.get(name, getattr(tenant, name))))
    return tenant


def key_to_hash(key: ApiKey) -> dict[str, str]:
    out = {name: str(getattr(key, name)) for name in KEY_INT_FIELDS}
    out.update(key_id=key.key_id, tenant_id=key.tenant_id, digest=key.digest, name=key.name,
               created_at=repr(key.created_at), expires_at=repr(key.expires_at), revoked="1" if key.revoked else "0")
    return out


def key_from_hash(raw: dict[str, str]) -> ApiKey:
    return ApiKey(key_id=raw["key_id"], tenant_id=raw["tenant_id"], digest=raw["digest"], name=raw.get("name", ""),
                  created_at=float(raw.get("created_at", 0)), expires_at=float(raw.get("expires_at", 0)),
                  revoked=raw.get("revoked") == "1", **{n: int(raw.get(n, 0)) for n in KEY_INT_FIELDS})
