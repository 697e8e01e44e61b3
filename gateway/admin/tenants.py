"""Tenants and API keys: the records the admin API edits and the admission script reads.

A limit of 0 means unlimited. Keys are shown once at creation and stored only as sha256 hex digests; a key's
public id is `k_` + the first 12 hex digits of its digest (enough to name it, useless to forge it).

Prefix caches are per tenant unless tenants name one `cache_group` (docs/architecture.md, "Tenant isolation"): a
shared cache tells whoever shares it, through `cached_tokens` and time to first token, which prefixes others sent.
`isolate_cache` is kept for old configs and clients: it reads as "no cache_group"; `true` is the default, and
`false` is refused unless the same body names the group to share with (it used to share with every tenant).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field, replace
from typing import Annotated, Any, Protocol

from pydantic import AfterValidator, Field, TypeAdapter, ValidationError, ValidationInfo, field_validator

from gateway.errors import ApiError, invalid_request
from gateway.store.spend import MAX_USD
from sluicegate.schema import UNKNOWN_KEYS, Schema, explain

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
    daily_budget_usd: float = 0.0
    """Spend per UTC day in US dollars at the models' configured prices (0: none); reserved at admission at the
    request's worst-case cost, settled at its actual cost, like the token budgets."""
    monthly_budget_usd: float = 0.0
    default_max_tokens: int = 256
    """Output reservation for requests that do not set max_tokens (at most output_tpm: default_reservation)."""
    guardrails: str = GUARDRAILS_OFF
    """Guardrail policy name (applied by the guardrails hook)."""
    cache_group: str = ""
    """Tenants naming the same group share one prefix-cache salt (one organisation's shared system prompt); empty:
    the tenant's prefixes are salted with its own id and never share KV blocks with another tenant's."""
    models: list[str] = field(default_factory=list)
    """Allowed models; empty allows every served model."""
    gen: int = 0
    """Bumped on every change; the admission script returns it so gateways refresh their cached copy."""
    created_ms: int = 0
    """When the record was created (Unix ms, the store's clock; 0: a record older than this field). A tenant deleted
    and created again under the same id is another tenant: settlements and fail-open state of the old one, still held
    by some gateway through an outage, are told apart by this and dropped."""

    @property
    def default_reservation(self) -> int:
        """What a request without max_tokens reserves, and is capped at: default_max_tokens, but never more than one
        minute's output_tpm, which no request could ever get (every such request would be refused as too large;
        admit.lua takes the same minimum)."""
        if 0 < self.output_tpm < self.default_max_tokens:
            return self.output_tpm
        return self.default_max_tokens

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    @property
    def isolate_cache(self) -> bool:
        """No cache group: the tenant's prefix cache is its own (the field older configs and clients know)."""
        return not self.cache_group

    @property
    def cache_salt(self) -> str:
        """The root of the tenant's block hash chain. A group's salt holds a ':', which no tenant id does, so a
        group can never take a tenant's chain (nor a tenant's own `cache_salt`, which body.py joins with '/')."""
        return f"group:{self.cache_group}" if self.cache_group else self.id

    def to_public(self) -> dict[str, Any]:
        return {**asdict(self), "isolate_cache": self.isolate_cache}


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

    def to_public(self) -> dict[str, Any]:
        public = asdict(self)
        del public["digest"]
        return public


TENANT_INT_FIELDS = (
    "rpm",
    "input_tpm",
    "output_tpm",
    "max_concurrent",
    "daily_tokens",
    "monthly_tokens",
    "default_max_tokens",
)
TENANT_USD_FIELDS = ("daily_budget_usd", "monthly_budget_usd")
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


def _not_a_path_segment(tenant_id: str) -> str:
    # "." and ".." would be path segments clients normalise away: such a tenant could never be read or deleted.
    if tenant_id in (".", ".."):
        raise ValueError("'.' and '..' cannot be tenant ids")
    return tenant_id


TenantId = Annotated[str, Field(pattern=TENANT_ID_RE.pattern), AfterValidator(_not_a_path_segment)]
Limit = Annotated[int, Field(ge=0, le=MAX_LIMIT)]


def _no_comma(model: str) -> str:
    if not model or "," in model:  # the Redis hash joins a tenant's models with commas
        raise ValueError("want a model name (not empty, no ',')")
    return model


ModelName = Annotated[str, AfterValidator(_no_comma)]


def _distinct(models: list[str]) -> list[str]:
    if len(set(models)) != len(models):
        raise ValueError(f"want each model once, got {models}")
    return models


def _printable(name: str) -> str:
    # A label shown in the console's pages, the CLI's tables and the audit log: no NUL, escape or newline in it.
    if not name.isprintable():
        raise ValueError("want printable characters only (no control characters or line breaks)")
    return name


Usd = Annotated[float, Field(ge=0.0, le=MAX_USD)]  # finite: Schema refuses NaN and infinities
CacheGroup = Annotated[str, Field(pattern=r"^([A-Za-z0-9_.-]{1,64})?$")]  # "" leaves the group (isolated again)
UnixSeconds = Annotated[float, Field(ge=0.0, le=MAX_UNIX_S)]  # finite: Schema refuses NaN and infinities


class TenantUpdate(Schema):
    """What an admin body or a seed entry may set on a Tenant (whose docstrings say what each field means); only the
    fields given are applied (model_fields_set), the defaults here are never written."""

    rpm: Limit = 0
    input_tpm: Limit = 0
    output_tpm: Limit = 0
    max_concurrent: Limit = 0
    daily_tokens: Limit = 0
    monthly_tokens: Limit = 0
    daily_budget_usd: Usd = 0.0
    monthly_budget_usd: Usd = 0.0
    default_max_tokens: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = 256
    """At least 1: a default reservation of 0 would let unbounded outputs through unreserved."""
    guardrails: str = GUARDRAILS_OFF
    """Checked against the gateway's policies by apply_tenant_fields (they are the running gateway's)."""
    cache_group: CacheGroup = ""
    """Declared before isolate_cache: its check reads it."""
    isolate_cache: bool = True
    """Compatibility: true is the default (no cache_group); false only together with a cache_group."""
    models: Annotated[list[ModelName], AfterValidator(_distinct)] = []

    @field_validator("isolate_cache")
    @classmethod
    def _no_cache_shared_with_everyone(cls, isolate: bool, info: ValidationInfo) -> bool:
        group = info.data.get("cache_group", "")
        if not isolate and not group:
            raise ValueError(
                "isolate_cache: false would share this tenant's prefix cache with every other tenant, who could "
                "then read its prompts through cached_tokens and response times, so it is refused; tenants are "
                "isolated by default. To share a prefix cache with chosen tenants, give each of them the same "
                "cache_group (e.g. cache_group: acme) and drop isolate_cache"
            )
        if isolate and group:
            raise ValueError(f"isolate_cache: true contradicts cache_group {group!r}; give one or the other")
        return isolate


KEY_NAME_MAX_CHARS = 200  # a label for people and the audit log, stored with every key


class KeyUpdate(Schema):
    """What an admin body may set on an ApiKey; only the fields given are applied."""

    name: Annotated[str, Field(max_length=KEY_NAME_MAX_CHARS), AfterValidator(_printable)] = ""
    expires_at: UnixSeconds = 0.0
    rpm: Limit = 0
    input_tpm: Limit = 0
    output_tpm: Limit = 0


_TENANT_ID: TypeAdapter[str] = TypeAdapter(TenantId)


def _validated(schema: type[Schema], body: Any) -> Any:
    """`body` as `schema`, or a 400 naming the first bad field."""
    try:
        return schema.model_validate(body)
    except ValidationError as exc:
        raise _bad_request(exc) from None


def _bad_request(exc: ValidationError) -> ApiError:
    first = exc.errors(include_url=False)[0]
    if first["type"] == UNKNOWN_KEYS:
        param = first["ctx"]["unknown"][0]
    else:
        param = str(first["loc"][0]) if first["loc"] else None
    return invalid_request(explain(exc), param=param)


def policy_name_check(hooks: object) -> Callable[[str], None]:
    """What a tenant's `guardrails` name must pass: the hooks' own check (GuardrailHooks.check_policy_name raises a
    ValueError naming the defined policies); hooks without one (guardrails off) define no policy but "off"."""
    return getattr(hooks, "check_policy_name", None) or _only_off


def _only_off(name: str) -> None:
    if name != GUARDRAILS_OFF:
        raise ValueError(
            f"guardrail policy {name!r} is not defined: this gateway runs without guardrails "
            f"(no `guardrails` section in its config); use {GUARDRAILS_OFF!r}"
        )


def _policy_name(value: str, check_policy: Callable[[str], None]) -> str:
    try:
        check_policy(value)
    except ValueError as exc:  # a name the gateway does not define would fail every request of the tenant
        raise invalid_request(str(exc), param="guardrails", code="guardrail_policy_unknown") from None
    return value


def apply_tenant_fields(tenant: Tenant, updates: dict[str, Any], check_policy: Callable[[str], None]) -> Tenant:
    """Validate and apply an admin update (unknown fields are a 400, not silently ignored); `check_policy` (from
    policy_name_check) raises ValueError for a guardrail policy name the gateway does not define."""
    update = _validated(TenantUpdate, updates)
    if "guardrails" in update.model_fields_set:
        _policy_name(update.guardrails, check_policy)
    for name in update.model_fields_set - {"isolate_cache"}:  # derived from cache_group, checked above
        setattr(tenant, name, getattr(update, name))
    return tenant


def tenant_field_changes(changes: dict[str, object]) -> dict[str, object]:
    """An admin update as stored fields: `isolate_cache` is derived, so setting it true leaves the cache group
    (false comes with the group to join, validated by TenantUpdate)."""
    out = {name: value for name, value in changes.items() if name != "isolate_cache"}
    if changes.get("isolate_cache") is True:
        out["cache_group"] = ""
    return out


def check_models_served(models: list[str], served: Collection[str]) -> None:
    """A tenant's allowed models must be ones the gateway serves: a typo would leave it able to use nothing."""
    unknown = [m for m in models if m not in served]
    if unknown:
        raise invalid_request(
            f"models {unknown} are not served by this gateway; served: {sorted(served)}",
            param="models",
            code="model_not_served",
        )


BUDGET_PRICE_FIELDS = frozenset({*TENANT_USD_FIELDS, "models"})
"""The updates that can leave a USD budget without a priced model to count."""


class CheckTenant(Protocol):
    def __call__(self, tenant: Tenant, updates: dict[str, Any], current: Tenant | None = None) -> Tenant:
        """Applies an update (or a new tenant's fields) to `tenant`, or raises the 400 that says what is wrong.
        `current`: the stored record an update lands on, where a USD budget is checked as the update leaves it."""
        ...


def make_tenant_check(
    check_policy: Callable[[str], None], served: Collection[str], priced: Collection[str]
) -> CheckTenant:
    """What every tenant write passes, from the admin API or the tenants seed: a guardrail policy (`check_policy`,
    from policy_name_check) or model the gateway does not define is a 400, and so is a budget in US dollars on a
    tenant none of whose models has a price (`priced`: the served models with one)."""

    def check_tenant(tenant: Tenant, updates: dict[str, Any], current: Tenant | None = None) -> Tenant:
        tenant = apply_tenant_fields(tenant, updates, check_policy)
        check_models_served(tenant.models, served)
        changed = BUDGET_PRICE_FIELDS.intersection(updates)
        if changed:  # an unrelated update of an older record still lands
            # on an update, the stored record as it will be: new models alone can leave its budget without a price
            after = tenant if current is None else replace(current, **{name: getattr(tenant, name) for name in changed})
            check_budget_priced(after, priced, served)
        return tenant

    return check_tenant


def check_budget_priced(tenant: Tenant, priced: Collection[str], served: Collection[str]) -> None:
    """A budget in US dollars counts the models' prices: on a tenant none of whose models has one, it would never
    apply, silently. `priced`: the served models with a price (gateway config `models.<m>.price`)."""
    usable = tenant.models or list(served)
    if any(model in priced for model in usable):
        return
    for name in TENANT_USD_FIELDS:
        if getattr(tenant, name) > 0:
            raise invalid_request(
                f"{name} counts US dollars at the models' prices, and none of the models this tenant may use "
                f"({sorted(usable)}) has one (`models.<name>.price` in the gateway config): it would never apply",
                param=name,
                code="budget_without_price",
            )


def apply_key_fields(key: ApiKey, updates: dict[str, Any]) -> ApiKey:
    update = _validated(KeyUpdate, updates)
    for name in update.model_fields_set:
        setattr(key, name, getattr(update, name))
    return key


def validate_tenant_id(tenant_id: Any) -> str:
    if tenant_id is None:
        raise invalid_request("Missing required parameter: 'id' (the new tenant's id).", param="id")
    try:
        return _TENANT_ID.validate_python(tenant_id, strict=True)
    except ValidationError:
        raise invalid_request(
            f"tenant id must match {TENANT_ID_RE.pattern} and not be '.' or '..', got {tenant_id!r}", param="id"
        ) from None


# Flat string maps, the shape of a Redis hash.
def tenant_to_hash(tenant: Tenant) -> dict[str, str]:
    out = {name: str(getattr(tenant, name)) for name in TENANT_INT_FIELDS}
    out.update({name: repr(float(getattr(tenant, name))) for name in TENANT_USD_FIELDS})
    out.update(
        guardrails=tenant.guardrails,
        cache_group=tenant.cache_group,
        # derived, still written: a gateway of an older version reading this record keeps the tenant isolated
        isolate_cache="1" if tenant.isolate_cache else "0",
        models=",".join(tenant.models),
        gen=str(tenant.gen),
        created_ms=str(tenant.created_ms),
        id=tenant.id,
    )
    return out


def tenant_from_hash(raw: dict[str, str]) -> Tenant:
    """A stored `isolate_cache` is ignored: a record written before cache groups existed is isolated now, whatever
    it said (the default changed; docs/operations.md, "Prefix-cache isolation")."""
    tenant = Tenant(
        id=raw["id"],
        guardrails=raw.get("guardrails", GUARDRAILS_OFF),
        cache_group=raw.get("cache_group", ""),
        daily_budget_usd=float(raw.get("daily_budget_usd", 0.0)),
        monthly_budget_usd=float(raw.get("monthly_budget_usd", 0.0)),
        models=[m for m in raw.get("models", "").split(",") if m],
        gen=int(raw.get("gen", 0)),
        created_ms=int(raw.get("created_ms", 0)),
    )
    for name in TENANT_INT_FIELDS:
        setattr(tenant, name, int(raw.get(name, getattr(tenant, name))))
    return tenant


def key_to_hash(key: ApiKey) -> dict[str, str]:
    out = {name: str(getattr(key, name)) for name in KEY_INT_FIELDS}
    out.update(
        key_id=key.key_id,
        tenant_id=key.tenant_id,
        digest=key.digest,
        name=key.name,
        created_at=repr(key.created_at),
        expires_at=repr(key.expires_at),
        revoked="1" if key.revoked else "0",
    )
    return out


def tenant_changes_to_hash(changes: dict[str, object]) -> dict[str, str]:
    """Only the changed fields, encoded as tenant_to_hash encodes them (a field-level update)."""
    fields: dict[str, Any] = tenant_field_changes(changes)  # values of Tenant's fields, by name
    encoded = tenant_to_hash(replace(Tenant(id=""), **fields))
    names = [*fields, "isolate_cache"] if "cache_group" in fields else list(fields)
    return {name: encoded[name] for name in names}


def key_changes_to_hash(changes: dict[str, object]) -> dict[str, str]:
    """Only the changed fields, encoded as key_to_hash encodes them (a field-level update)."""
    fields: dict[str, Any] = changes  # values of ApiKey's fields, by name
    encoded = key_to_hash(replace(ApiKey("", "", ""), **fields))
    return {name: encoded[name] for name in changes}


def key_from_hash(raw: dict[str, str]) -> ApiKey:
    return ApiKey(
        key_id=raw["key_id"],
        tenant_id=raw["tenant_id"],
        digest=raw["digest"],
        name=raw.get("name", ""),
        created_at=float(raw.get("created_at", 0)),
        expires_at=float(raw.get("expires_at", 0)),
        revoked=raw.get("revoked") == "1",
        **{n: int(raw.get(n, 0)) for n in KEY_INT_FIELDS},
    )
