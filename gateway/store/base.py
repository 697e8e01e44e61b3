"""The store contract the request path and the admin API use. Semantics (both implementations):

- admit(): one atomic step that checks the key (exists, not revoked, not expired), the model, concurrency, the
  daily/monthly budgets (in tokens and in US dollars) and every bucket (tenant and key: requests, input tokens,
  output tokens), then takes from all of them or from none. Clock: the store's own (Redis TIME), never the gateway's.
- settle(): once per admitted request: actual tokens replace the reservation (refund, or charge the extra, leaving
  the bucket in debt down to minus one minute's allowance) and the actual cost the reserved one, frees the
  concurrency slot, records usage (tokens and micro-dollars, per tenant, model and key).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gateway.admin.tenants import ApiKey, Tenant

# Admission outcomes (Admission.reason).
OK = ""
UNAUTHORIZED = "unauthorized"
MODEL_NOT_ALLOWED = "model_not_allowed"
CONCURRENCY = "concurrency"
DAILY_BUDGET = "daily_budget"
MONTHLY_BUDGET = "monthly_budget"
DAILY_BUDGET_USD = "daily_budget_usd"
MONTHLY_BUDGET_USD = "monthly_budget_usd"
# Bucket names; a reason may add "_too_large" when one request needs more than the bucket can ever hold.
REQUESTS = "requests"
INPUT_TOKENS = "input_tokens"
OUTPUT_TOKENS = "output_tokens"
BUCKETS = (REQUESTS, INPUT_TOKENS, OUTPUT_TOKENS)
TOO_LARGE = "_too_large"
# Tenant-wide limits an admission reports what is left of (Admission.headroom): concurrency, the budgets and the
# tenant's own buckets (shared by all its keys; Admission.buckets holds the tighter of tenant and key per kind).
# The money budgets come last (added after the rest; admit.lua reports them in this order too).
HEADROOM = ("concurrency", "daily_tokens", "monthly_tokens", *BUCKETS, "daily_micro_usd", "monthly_micro_usd")
# retire_key outcomes: a replacement is issued only for RETIRED.
RETIRED, KEY_MISSING, KEY_REVOKED, KEY_EXPIRED = "retired", "missing", "revoked", "expired"
# Settlement kinds (Settlement.kind).
FINAL, VOID, RECORD = "final", "void", "record"


class StoreUnavailable(Exception):
    """The store could not answer in time (Redis down or slow)."""


class StoreReplyLost(StoreUnavailable):
    """The command was sent but its reply never came (timeout, connection lost): it may have run."""


class StoreRejected(Exception):
    """Redis answered with an error (a script error, a value it cannot take): retrying would fail the same way."""


@dataclass
class BucketView:
    """What the rate-limit headers report for one bucket kind (the tighter of tenant and key)."""

    limit: int
    remaining: int
    reset_s: float


@dataclass
class AdmitRequest:
    tenant_id: str
    digest: str
    model: str
    prompt_tokens: int
    max_tokens: int | None
    """Output tokens per completion; None: the tenant's default_max_tokens."""
    completions: int
    """Choices per prompt times prompts (n x len(prompts)): the reservation is max_tokens x completions."""
    request_id: str
    lease_s: float
    reserved_cost_micro_usd: int = 0
    """The request's worst-case cost (spend.worst_cost_micro_usd), taken from the money budgets; 0: a free model."""

    def reserved_out(self, default_max_tokens: int) -> int:
        return reservation(self.max_tokens, self.completions, default_max_tokens)


def reservation(max_tokens: int | None, completions: int, default_max_tokens: int) -> int:
    """The output reservation (admit.lua computes the same): max_tokens, or the tenant's default, per completion."""
    return (default_max_tokens if max_tokens is None else max_tokens) * completions


@dataclass
class Admission:
    reason: str
    retry_after_s: float = 0.0
    tenant_gen: int = 0
    reserved_out: int = 0
    day: str = ""
    month: str = ""
    buckets: dict[str, BucketView] = field(default_factory=dict)
    headroom: dict[str, tuple[int, int]] = field(default_factory=dict)
    """name in HEADROOM -> (limit, left after this request), for the limits the tenant has."""
    store: Store | None = None
    """The store that admitted it; settlement goes back to the same one (Redis, or the fail-open local one)."""
    fallback: bool = False
    """Decided by fail-open local buckets while Redis was unreachable."""
    reserved_cost_micro_usd: int = 0
    """What it took from the money budgets (the request's): settlement replaces it with the actual cost."""

    @property
    def ok(self) -> bool:
        return self.reason == OK


@dataclass
class Settlement:
    tenant_id: str
    digest: str
    model: str
    request_id: str
    reserved_in: int
    reserved_out: int
    actual_in: int
    actual_out: int
    day: str
    month: str
    lease_end_ms: int = 0
    """Wall-clock ms at which the admission's in-flight lease ends (0: unknown)."""
    replay: bool = False
    """Sent again after a lost reply: skipped when the request's lease is gone before it ended, since then the
    first attempt ran (or the admission it settles never did)."""
    kind: str = FINAL
    """FINAL: a request's end (actual usage replaces its reservation). VOID: returns what an admission whose reply
    was lost may have taken (reservation and request unit; no usage). RECORD: a request admitted on a gateway's
    local buckets while Redis was down, sent to Redis later to count its usage and budget spend."""
    cached_in: int = 0
    """Of actual_in, the prompt tokens the replica served from its prefix cache (counted in usage)."""
    reserved_cost_micro_usd: int = 0
    """Admission.reserved_cost_micro_usd: what the money budgets get back."""
    cost_micro_usd: int = 0
    """The actual cost (spend.cost_micro_usd): charged to the money budgets and counted in usage."""
    tenant_created_ms: int = 0
    """Tenant.created_ms of the tenant it settles for: one queued through an outage is dropped if the tenant was
    deleted (and perhaps created again under its id) meanwhile. 0: not checked."""


class AdminStore(Protocol):
    """The records: what the admin API and the tenants seed use. Every store has them, the request path's
    ResilientStore and LocalStore too (whose admit() and settle() take more than Store's)."""

    async def get_tenant(self, tenant_id: str) -> Tenant | None: ...

    async def put_tenant(self, tenant: Tenant) -> Tenant:
        """Create or replace; bumps tenant.gen so every gateway refreshes its cached copy on its next request."""

    async def delete_tenant(self, tenant_id: str) -> bool: ...

    async def list_tenants(self) -> list[Tenant]: ...

    async def create_tenant(self, tenant: Tenant) -> Tenant | None:
        """Create only when missing, in one step (None: it exists); two racing creates cannot both win."""

    async def update_tenant(self, tenant_id: str, changes: dict[str, object]) -> Tenant | None:
        """Set only the named fields and bump gen, atomically; None when there is no such tenant (an update racing a
        delete never brings back part of a record)."""

    async def put_key(self, key: ApiKey) -> None: ...

    async def update_key(self, tenant_id: str, digest: str, changes: dict[str, object]) -> ApiKey | None:
        """Set only the named fields (a revocation is `{"revoked": True}`), atomically: writes racing each other
        all land and none undoes another. None when there is no such key."""

    async def retire_key(self, tenant_id: str, digest: str, grace_s: float) -> tuple[str, ApiKey | None]:
        """Rotation's first half, in one step on the store's clock: a missing, revoked or expired key is refused
        (RETIRE_* outcome, record as it was), else its expiry is cut to now + grace_s (never extended), or it is
        revoked when grace_s is 0. Returns (RETIRED, the record before the cut)."""

    async def delete_key(self, tenant_id: str, digest: str) -> bool: ...

    async def list_keys(self, tenant_id: str) -> list[ApiKey]: ...

    async def usage(self, tenant_id: str, days: list[str]) -> dict[str, dict[str, int]]:
        """day -> {"requests", "input_tokens", "output_tokens", "cached_input_tokens", "cost_micro_usd",
        "model:<m>:<field>", "key:<id>:<field>"}; the last two fields only where not zero."""


class Store(AdminStore, Protocol):
    """A store that decides admissions itself (RedisStore, MemoryStore, LocalStore): the one an Admission names."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    # request path
    async def get_key(self, digest: str) -> ApiKey | None: ...

    async def admit(self, request: AdmitRequest) -> Admission: ...

    async def settle(self, settlement: Settlement) -> None: ...
