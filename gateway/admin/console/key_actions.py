"""A tenant's keys: issue (the plaintext shown once, on a page that is never cached), rotate with a grace period,
revoke, delete, change the expiry or the per-key limits. Each is the JSON API's own function (api.py)."""

from __future__ import annotations

from starlette.responses import Response

from gateway.admin.api import (
    DEFAULT_ROTATION_GRACE_S,
    change_key,
    expiry_fields,
    find_key,
    issue_key,
    key_changes,
    remove_key,
    rotate,
)
from gateway.admin.console.forms import expiry_body, grace_s, key_body, limit_fields
from gateway.admin.console.page import Page, redirect
from gateway.admin.tenants import KEY_INT_FIELDS, ApiKey
from gateway.errors import ApiError


async def _key(page: Page) -> ApiKey:
    params = page.request.path_params
    return await find_key(page.gw.store, params["tenant"], params["key_id"])


async def create_key(page: Page) -> Response:
    tenant_id = page.request.path_params["tenant"]
    if await page.gw.store.get_tenant(tenant_id) is None:
        raise ApiError(404, f"No tenant {tenant_id!r}.", code="tenant_not_found")
    key, secret = await issue_key(page.gw.store, tenant_id, expiry_fields(key_body(page.form)))
    return page.render("key_created.html", key=key, secret=secret, rotated=None)


async def rotate_key(page: Page) -> Response:
    old = await _key(page)
    key, secret = await rotate(page.gw.store, old, grace_s(page.form, DEFAULT_ROTATION_GRACE_S))
    return page.render("key_created.html", key=key, secret=secret, rotated=old)


async def revoke_key(page: Page) -> Response:
    key = await _key(page)
    await change_key(page.gw.store, key, {"revoked": True})
    return redirect(f"/tenants/{key.tenant_id}", "revoked")


async def delete_key(page: Page) -> Response:
    key = await _key(page)
    await remove_key(page.gw.store, key)
    return redirect(f"/tenants/{key.tenant_id}", "deleted")


async def set_expiry(page: Page) -> Response:
    key = await _key(page)
    await change_key(page.gw.store, key, key_changes(key, expiry_fields(expiry_body(page.form))))
    return redirect(f"/tenants/{key.tenant_id}", "expiry")


async def set_limits(page: Page) -> Response:
    """The key's own rpm / input / output token limits (empty: none beyond the tenant's), as `keys update`."""
    key = await _key(page)
    await change_key(page.gw.store, key, key_changes(key, limit_fields(page.form, KEY_INT_FIELDS)))
    return redirect(f"/tenants/{key.tenant_id}", "limits")
