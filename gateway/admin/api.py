"""The admin API (`/admin/v1`, its own bearer token): tenants, keys, limits, usage. Every change is written to
the store at once; gateways see it on their next request (auth.py explains how).

    GET    /tenants                                   list
    POST   /tenants                                   create {id, limits...}            -> 201, 409 if it exists
    GET    /tenants/{tenant}                          read
    PATCH  /tenants/{tenant}                          update limits / policy / models
    DELETE /tenants/{tenant}                          delete with its keys, buckets and usage
    POST   /tenants/{tenant}/keys                     issue {name, expires_at | ttl_s, rpm...} -> the key, shown once
    GET    /tenants/{tenant}/keys                     list (never the key itself)
    PATCH  /tenants/{tenant}/keys/{key_id}            update name / expiry / per-key limits
    DELETE /tenants/{tenant}/keys/{key_id}            delete the key and its buckets
    POST   /tenants/{tenant}/keys/{key_id}/revoke
    POST   /tenants/{tenant}/keys/{key_id}/rotate     issue a replacement with the same expiry {grace_s: 86400};
                                                      the old key ends after grace_s (0: now); 409 if revoked
                                                      or expired

Every write changes only the fields it names, in one store step (field-level Lua scripts in Redis): a
revocation racing a PATCH or a rotation is never undone.
    GET    /tenants/{tenant}/usage?days=7             per day and in total over the days: tokens and cost
                                                      (micro-dollars and USD), per model, per key
    ...    /models/{model}/replicas[/{name}[/drain]]  replica pools at run time (replicas.py)

The store steps behind the handlers (new_tenant, change_tenant, remove_tenant, find_key, issue_key, change_key,
rotate, remove_key, usage_days) are functions of their own: the web console (admin/console/) calls the same ones. Those
that change something write the audit log (admin/audit.py); the caller names who with `audit.acting_as`.
"""

from __future__ import annotations

import dataclasses
import functools
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.admin import audit, replicas
from gateway.admin.tenants import (
    MAX_UNIX_S,
    ApiKey,
    CheckTenant,
    Tenant,
    apply_key_fields,
    digest_key,
    key_id_of,
    make_tenant_check,
    new_api_key,
    policy_name_check,
    validate_tenant_id,
)
from gateway.admin.types import AdminGateway
from gateway.asgi import ClientGone, read_body
from gateway.errors import ApiError, invalid_request, unavailable
from gateway.store.base import KEY_EXPIRED, KEY_MISSING, KEY_REVOKED, AdminStore, StoreUnavailable
from gateway.store.clock import periods
from gateway.store.spend import usd

MAX_USAGE_DAYS = 400
DEFAULT_ROTATION_GRACE_S = 86_400.0
"""How long a rotated key keeps working when the request names no grace: a day for clients to switch over."""

Handler = Callable[[Request, AdminStore], Awaitable[Response]]


def _error(error: ApiError) -> Response:
    return Response(error.body(), error.status, headers=error.headers, media_type="application/json")


def admin_routes(gw: AdminGateway) -> list[Route]:
    def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            token = gw.config.admin_token
            given = request.headers.get("authorization", "")
            if not token:
                return _error(ApiError(404, "The admin API is disabled (no admin token configured).", code="disabled"))
            scheme, _, given_token = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given_token.strip().encode(), token.encode()):
                return _error(ApiError(401, "Invalid admin token.", code="invalid_admin_token"))
            try:
                with audit.acting_as(audit.client_address(request)):  # who, for the audit log (admin/audit.py)
                    response = await handler(request, gw.store)
                if request.method != "GET" and "tenant" in request.path_params:
                    gw.admin_changed(request.path_params["tenant"])
                return response
            except ApiError as error:
                return _error(error)
            except StoreUnavailable:
                return _error(unavailable("The store (Redis) is unreachable; admin changes need it."))

        return run

    check_tenant = tenant_checker(gw)
    return [
        Route("/tenants", endpoint(list_tenants), methods=["GET"]),
        Route("/tenants", endpoint(functools.partial(create_tenant, check_tenant=check_tenant)), methods=["POST"]),
        Route("/tenants/{tenant}", endpoint(get_tenant), methods=["GET"]),
        Route(
            "/tenants/{tenant}",
            endpoint(functools.partial(update_tenant, check_tenant=check_tenant)),
            methods=["PATCH"],
        ),
        Route("/tenants/{tenant}", endpoint(delete_tenant), methods=["DELETE"]),
        Route("/tenants/{tenant}/keys", endpoint(create_key), methods=["POST"]),
        Route("/tenants/{tenant}/keys", endpoint(list_keys), methods=["GET"]),
        Route("/tenants/{tenant}/keys/{key_id}", endpoint(update_key), methods=["PATCH"]),
        Route("/tenants/{tenant}/keys/{key_id}", endpoint(delete_key), methods=["DELETE"]),
        Route("/tenants/{tenant}/keys/{key_id}/revoke", endpoint(revoke_key), methods=["POST"]),
        Route("/tenants/{tenant}/keys/{key_id}/rotate", endpoint(rotate_key), methods=["POST"]),
        Route("/tenants/{tenant}/usage", endpoint(usage), methods=["GET"]),
        # model names may hold '/' (org/model): the model is matched as a path, the replica name never has one
        Route(
            "/models/{model:path}/replicas", endpoint(functools.partial(replicas.list_replicas, gw=gw)), methods=["GET"]
        ),
        Route(
            "/models/{model:path}/replicas",
            endpoint(functools.partial(replicas.add_replica, gw=gw, read_json=_json)),
            methods=["POST"],
        ),
        Route(
            "/models/{model:path}/replicas/{name}/drain",
            endpoint(functools.partial(replicas.drain_replica, gw=gw)),
            methods=["POST"],
        ),
        Route(
            "/models/{model:path}/replicas/{name}",
            endpoint(functools.partial(replicas.remove_replica, gw=gw)),
            methods=["DELETE"],
        ),
    ]


def tenant_checker(gw: AdminGateway) -> CheckTenant:
    """Validates an update against this gateway (tenants.make_tenant_check)."""
    priced = [name for name, model in gw.config.models.items() if model.price is not None]
    return make_tenant_check(policy_name_check(gw.hooks), gw.config.models, priced)


ADMIN_MAX_BODY_BYTES = 1 << 20  # a tenant or key is a few hundred bytes; a larger body is a mistake or an attack


async def _json(request: Request) -> dict[str, Any]:
    # read_body: the size cap (413) and the deadline (408) of the OpenAI endpoints, at the admin API's own size
    try:
        raw = await read_body(request.receive, ADMIN_MAX_BODY_BYTES)
    except ClientGone:  # nobody is left to answer; an error ends the handler without a traceback in the log
        raise invalid_request("The client disconnected before its request body arrived.") from None
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting json cannot parse (was a 500)
        detail = "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise invalid_request(f"The request body is not valid JSON: {detail}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.", code="invalid_json")
    return body


async def _tenant(request: Request, store: AdminStore) -> Tenant:
    tenant_id = request.path_params["tenant"]
    tenant = await store.get_tenant(tenant_id)
    if tenant is None:
        raise ApiError(404, f"No tenant {tenant_id!r}.", code="tenant_not_found", param="tenant")
    return tenant


async def _key(request: Request, store: AdminStore) -> ApiKey:
    return await find_key(store, (await _tenant(request, store)).id, request.path_params["key_id"])


async def find_key(store: AdminStore, tenant_id: str, key_id: str) -> ApiKey:
    tenant = await store.get_tenant(tenant_id)
    if tenant is None:
        raise ApiError(404, f"No tenant {tenant_id!r}.", code="tenant_not_found", param="tenant")
    for key in await store.list_keys(tenant.id):
        if key.key_id == key_id:
            return key
    raise ApiError(404, f"No key {key_id!r} for tenant {tenant.id!r}.", code="key_not_found", param="key_id")


async def list_tenants(request: Request, store: AdminStore) -> Response:
    return JSONResponse({"data": [t.to_public() for t in await store.list_tenants()]})


async def create_tenant(request: Request, store: AdminStore, check_tenant: CheckTenant) -> Response:
    tenant = await new_tenant(store, check_tenant, await _json(request))
    return JSONResponse(tenant.to_public(), status_code=201)


async def new_tenant(store: AdminStore, check_tenant: CheckTenant, body: dict[str, Any]) -> Tenant:
    """`body`: the tenant's id and any limits; 409 when the id is taken."""
    tenant_id = validate_tenant_id(body.pop("id", None))
    tenant = await store.create_tenant(check_tenant(Tenant(id=tenant_id), body))
    if tenant is None:
        raise ApiError(409, f"Tenant {tenant_id!r} already exists; PATCH it instead.", code="tenant_exists")
    audit.record("tenant.create", tenant=tenant.id, after=audit.tenant_state(tenant))
    return tenant


async def get_tenant(request: Request, store: AdminStore) -> Response:
    return JSONResponse((await _tenant(request, store)).to_public())


async def update_tenant(request: Request, store: AdminStore, check_tenant: CheckTenant) -> Response:
    tenant = await change_tenant(store, check_tenant, request.path_params["tenant"], await _json(request))
    return JSONResponse(tenant.to_public())


async def change_tenant(store: AdminStore, check_tenant: CheckTenant, tenant_id: str, body: dict[str, Any]) -> Tenant:
    """Writes only the fields `body` names; 404 when there is no such tenant."""
    # The audit log's "before", and the record a USD budget is checked on; the update itself is one store step.
    before = await store.get_tenant(tenant_id)
    # Validated on a scratch record: only the fields `body` names are written.
    checked = check_tenant(Tenant(id=tenant_id), body, before)
    tenant = await store.update_tenant(tenant_id, {name: getattr(checked, name) for name in body})
    if tenant is None:
        raise ApiError(404, f"No tenant {tenant_id!r}.", code="tenant_not_found", param="tenant")
    audit.record("tenant.update", tenant=tenant_id, before=audit.tenant_state(before), after=audit.tenant_state(tenant))
    return tenant


async def delete_tenant(request: Request, store: AdminStore) -> Response:
    tenant = await remove_tenant(store, await _tenant(request, store))
    return JSONResponse({"id": tenant.id, "deleted": True})


async def remove_tenant(store: AdminStore, tenant: Tenant) -> Tenant:
    """Deletes the tenant with its keys, buckets and usage."""
    await store.delete_tenant(tenant.id)
    audit.record("tenant.delete", tenant=tenant.id, before=audit.tenant_state(tenant))
    return tenant


def expiry_fields(body: dict[str, Any]) -> dict[str, Any]:
    """`ttl_s` in `body` turned into the `expires_at` it means."""
    ttl_s = body.pop("ttl_s", None)
    if ttl_s is not None and body.get("expires_at") is not None:
        raise invalid_request("Give expires_at or ttl_s, not both.", param="ttl_s")
    if ttl_s is not None:
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, (int, float)) or not 0 < ttl_s <= MAX_UNIX_S / 2:
            raise invalid_request(
                f"ttl_s must be a positive number of seconds up to {MAX_UNIX_S / 2:.0f}, got {ttl_s!r}", param="ttl_s"
            )
        body["expires_at"] = time.time() + ttl_s
    return body


async def _issue(store: AdminStore, tenant_id: str, fields: dict[str, Any]) -> Response:
    key, secret = await issue_key(store, tenant_id, fields)
    return JSONResponse({**key.to_public(), "key": secret}, status_code=201)


async def issue_key(store: AdminStore, tenant_id: str, fields: dict[str, Any]) -> tuple[ApiKey, str]:
    """A new key for the tenant: its record and its plaintext, which is never stored and so shown only now."""
    secret = new_api_key()
    digest = digest_key(secret)
    now_s = time.time()
    key = apply_key_fields(ApiKey(key_id_of(digest), tenant_id, digest, created_at=now_s), fields)
    if 0 < key.expires_at <= now_s:  # a key born expired is a mistake (a date in ms, or in the past), not a request
        raise invalid_request(
            f"expires_at must be in the future (Unix seconds), got {key.expires_at:.0f}; now is {now_s:.0f}",
            param="expires_at",
        )
    await store.put_key(key)
    audit.record("key.create", tenant=tenant_id, key_id=key.key_id, after=audit.key_state(key))
    return key, secret


async def create_key(request: Request, store: AdminStore) -> Response:
    tenant = await _tenant(request, store)
    return await _issue(store, tenant.id, expiry_fields(await _json(request)))


async def list_keys(request: Request, store: AdminStore) -> Response:
    tenant = await _tenant(request, store)
    return JSONResponse({"data": [k.to_public() for k in await store.list_keys(tenant.id)]})


def _key_gone(key: ApiKey) -> ApiError:
    return ApiError(404, f"No key {key.key_id!r} for tenant {key.tenant_id!r}.", code="key_not_found", param="key_id")


async def _update_key(store: AdminStore, key: ApiKey, changes: dict[str, object]) -> Response:
    return JSONResponse((await change_key(store, key, changes)).to_public())


async def change_key(store: AdminStore, key: ApiKey, changes: dict[str, object]) -> ApiKey:
    """Writes only `changes`, in one store step: a revocation racing this write stays (see admin_update.lua)."""
    updated = await store.update_key(key.tenant_id, key.digest, changes)
    if updated is None:  # deleted since it was looked up
        raise _key_gone(key)
    audit.record(
        "key.revoke" if changes == {"revoked": True} else "key.update",
        tenant=key.tenant_id,
        key_id=key.key_id,
        before=audit.key_state(key),
        after=audit.key_state(updated),
    )
    return updated


async def update_key(request: Request, store: AdminStore) -> Response:
    key = await _key(request, store)
    return await _update_key(store, key, key_changes(key, expiry_fields(await _json(request))))


def key_changes(key: ApiKey, body: dict[str, Any]) -> dict[str, object]:
    """`body` validated as a key update: the fields it names, with their values."""
    checked = apply_key_fields(ApiKey(key.key_id, key.tenant_id, key.digest), body)  # a scratch record
    return {name: getattr(checked, name) for name in body}


async def revoke_key(request: Request, store: AdminStore) -> Response:
    return await _update_key(store, await _key(request, store), {"revoked": True})


async def delete_key(request: Request, store: AdminStore) -> Response:
    key = await remove_key(store, await _key(request, store))
    return JSONResponse({"key_id": key.key_id, "deleted": True})


async def remove_key(store: AdminStore, key: ApiKey) -> ApiKey:
    """Deletes the key and its buckets; 404 when it is already gone."""
    if not await store.delete_key(key.tenant_id, key.digest):
        raise _key_gone(key)
    audit.record("key.delete", tenant=key.tenant_id, key_id=key.key_id, before=audit.key_state(key))
    return key


async def rotate_key(request: Request, store: AdminStore) -> Response:
    key = await _key(request, store)
    body = await _json(request)
    unknown = set(body) - {"grace_s"}
    if unknown:
        raise invalid_request(
            f"unknown rotate field {sorted(unknown)[0]!r}; known: ['grace_s']", param=sorted(unknown)[0]
        )
    key, secret = await rotate(store, key, body.get("grace_s", DEFAULT_ROTATION_GRACE_S))
    return JSONResponse({**key.to_public(), "key": secret}, status_code=201)


async def rotate(store: AdminStore, key: ApiKey, grace_s: object) -> tuple[ApiKey, str]:
    """Cuts `key` to end after `grace_s` and issues its replacement (record, plaintext); 409 if revoked or expired."""
    if isinstance(grace_s, bool) or not isinstance(grace_s, (int, float)) or not 0 <= grace_s <= MAX_UNIX_S / 2:
        raise invalid_request(
            f"grace_s must be a non-negative number of seconds up to {MAX_UNIX_S / 2:.0f}, got {grace_s!r}",
            param="grace_s",
        )
    # One store step checks and cuts the old key, so a revocation or expiry cannot slip between check and write.
    outcome, old = await store.retire_key(key.tenant_id, key.digest, grace_s)
    if outcome == KEY_MISSING or old is None:
        raise _key_gone(key)
    if outcome == KEY_REVOKED:  # a replacement would hand back the access the revocation took away
        raise ApiError(
            409, f"Key {key.key_id!r} is revoked; issue a new key instead.", code="key_revoked", param="key_id"
        )
    if outcome == KEY_EXPIRED:  # likewise for an expiry: rotation must not bring a dead key back
        raise ApiError(
            409, f"Key {key.key_id!r} has expired; issue a new key instead.", code="key_expired", param="key_id"
        )
    # The replacement keeps the old key's expiry: rotating a 24 h key must not make a never-expiring one.
    fields = {
        "name": old.name,
        "rpm": old.rpm,
        "input_tpm": old.input_tpm,
        "output_tpm": old.output_tpm,
        "expires_at": old.expires_at,
    }
    new, secret = await issue_key(store, key.tenant_id, fields)
    cut_s = time.time() + grace_s  # the store cut it on its own clock; this is the same moment give or take
    retired = (
        dataclasses.replace(old, revoked=True)
        if grace_s == 0
        else dataclasses.replace(old, expires_at=min(old.expires_at, cut_s) if old.expires_at else cut_s)
    )
    audit.record(
        "key.rotate",
        tenant=key.tenant_id,
        key_id=key.key_id,
        before=audit.key_state(old),
        after={**(audit.key_state(retired) or {}), "replaced_by": new.key_id},
    )
    return new, secret


async def usage(request: Request, store: AdminStore) -> Response:
    tenant = await _tenant(request, store)
    try:
        num_days = int(request.query_params.get("days", "7"))
    except ValueError:
        num_days = -1
    if not 1 <= num_days <= MAX_USAGE_DAYS:
        raise invalid_request(f"days must be an integer between 1 and {MAX_USAGE_DAYS}", param="days")
    days = await usage_days(store, tenant.id, num_days)
    return JSONResponse({"tenant": tenant.id, "days": days, "total": usage_total(days)})


async def usage_days(store: AdminStore, tenant_id: str, num_days: int) -> list[dict[str, Any]]:
    """The last `num_days` UTC days' usage, newest first; days without any are left out."""
    now_ms = int(time.time() * 1000)
    days = [periods(now_ms - i * 86_400_000)[0] for i in range(num_days)]
    raw = await store.usage(tenant_id, days)
    return [usage_day(day, raw[day]) for day in days if day in raw]


USAGE_COUNTS = ("requests", "input_tokens", "output_tokens", "cached_input_tokens", "cost_micro_usd")
"""In a day's and the total's top level always (0 when none), with `cost_usd` beside `cost_micro_usd`; in a
by_model / by_key entry the last two (and `cost_usd`) only where not zero."""


def usage_day(day: str, fields: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {"day": day, **dict.fromkeys(USAGE_COUNTS, 0), "by_model": {}, "by_key": {}}
    for name, value in fields.items():
        scope, _, rest = name.partition(":")
        if scope in ("model", "key"):
            owner, _, metric = rest.rpartition(":")
            out["by_" + scope].setdefault(owner, {})[metric] = value
        else:
            out[name] = value
    return _with_usd(out)


def usage_total(days: list[dict[str, Any]]) -> dict[str, Any]:
    """`days` (usage_day's) added up: the period's usage and spend at a glance, per model and per key too."""
    total: dict[str, Any] = {**dict.fromkeys(USAGE_COUNTS, 0), "by_model": {}, "by_key": {}}
    for day in days:
        for name in USAGE_COUNTS:
            total[name] += day[name]
        for scope in ("by_model", "by_key"):
            for owner, counts in day[scope].items():
                into = total[scope].setdefault(owner, {})
                for name, value in counts.items():
                    if name != "cost_usd":  # derived again below, from the exact sum
                        into[name] = into.get(name, 0) + value
    return _with_usd(total)


def _with_usd(entry: dict[str, Any]) -> dict[str, Any]:
    """`cost_usd` (a float, for display) beside every `cost_micro_usd` (the exact integer)."""
    entry["cost_usd"] = usd(entry["cost_micro_usd"])
    for scope in ("by_model", "by_key"):
        for counts in entry[scope].values():
            if "cost_micro_usd" in counts:
                counts["cost_usd"] = usd(counts["cost_micro_usd"])
    return entry
