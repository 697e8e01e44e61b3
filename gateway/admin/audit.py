"""The admin audit log: one JSON line per admin change on the `sluicegate.audit` logger (stdout; runtime.py routes
it there at start-up): what changed, the record before and after, when, and who (the admin client's address).

    {"time": "2026-12-01T23:59:59.123Z", "actor": "10.0.0.5:51234", "action": "key.revoke", "tenant": "acme",
     "key_id": "k_1234abcd5678", "model": null, "replica": null,
     "before": {"key_id": "k_1234abcd5678", "digest": "9f86d0...", "revoked": false, ...},
     "after": {"key_id": "k_1234abcd5678", "digest": "9f86d0...", "revoked": true, ...}}

Actions: tenant.create, tenant.update, tenant.delete, key.create, key.update, key.revoke, key.rotate, key.delete,
replica.add, replica.drain, replica.remove. Keys appear by id and sha256 digest only: the plaintext key is never
stored, so it cannot be logged, and the admin token never reaches this module.

The store steps both the admin API and the web console call (admin/api.py's new_tenant, change_tenant, remove_tenant,
issue_key, change_key, rotate, remove_key; admin/replicas.py's `applied`) call `record`, so each change is logged
once whichever way it came. Who made it is a context variable: the HTTP layer sets it around a handler with
`acting_as(client_address(request))`; a change made with none set is logged with actor "unknown".
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from starlette.requests import HTTPConnection

from gateway.admin.tenants import ApiKey, Tenant
from sluicegate.json_logs import JsonLines

AUDIT_LOGGER = "sluicegate.audit"
UNKNOWN_ACTOR = "unknown"

_actor: ContextVar[str] = ContextVar("sluicegate_admin_actor", default=UNKNOWN_ACTOR)
_lines = JsonLines(AUDIT_LOGGER)


def client_address(connection: HTTPConnection) -> str:
    """`host:port` of the admin client as the gateway saw it (a proxy in front shows as itself)."""
    client = connection.client
    return f"{client.host}:{client.port}" if client is not None else UNKNOWN_ACTOR


@contextmanager
def acting_as(actor: str) -> Iterator[None]:
    """Changes recorded inside the block name `actor` as who made them."""
    token = _actor.set(actor)
    try:
        yield
    finally:
        _actor.reset(token)


def tenant_state(tenant: Tenant | None) -> dict[str, Any] | None:
    return tenant.to_public() if tenant is not None else None


def key_state(key: ApiKey | None) -> dict[str, Any] | None:
    """The key's public fields and its digest: enough to find it, nothing to use it with."""
    return {**key.to_public(), "digest": key.digest} if key is not None else None


def record(
    action: str,
    *,
    tenant: str | None = None,
    key_id: str | None = None,
    model: str | None = None,
    replica: str | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> None:
    line = {
        "time": datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
        "actor": _actor.get(),
        "action": action,
        "tenant": tenant,
        "key_id": key_id,
        "model": model,
        "replica": replica,
        "before": before,
        "after": after,
    }
    _lines.write(json.dumps(line, default=str))
