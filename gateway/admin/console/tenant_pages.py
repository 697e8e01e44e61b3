"""Tenant pages: the list (paged, filtered: light with thousands of tenants), create, the tenant's own page (limits,
budgets, guardrail policy, allowed models, its keys and live usage), edit and delete. Writes go through the JSON
API's own functions (api.py), so both validate alike."""

from __future__ import annotations

import time

from starlette.responses import Response

from gateway.admin.api import change_tenant, new_tenant, remove_tenant
from gateway.admin.console.forms import tenant_body
from gateway.admin.console.page import Page, redirect
from gateway.admin.console.usage import tenant_usage
from gateway.admin.tenants import Tenant
from gateway.errors import ApiError

PAGE_SIZE = 50
TENANT_LIST_TTL_S = 10.0
"""How long the list pages reuse one read of every tenant: reading a thousand from Redis takes a round trip each
(hundreds of ms), paging and filtering through them should not. Changes made through this console show at once;
others (the API, other gateways) within this long."""


async def _tenant(page: Page) -> Tenant:
    tenant_id = page.request.path_params["tenant"]
    tenant = await page.gw.store.get_tenant(tenant_id)
    if tenant is None:
        raise ApiError(404, f"No tenant {tenant_id!r}.", code="tenant_not_found")
    return tenant


def _page_number(raw: str) -> int:
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


async def _all_tenants(page: Page) -> list[Tenant]:
    cached, now_s = page.console.tenant_list, time.monotonic()
    if cached is None or now_s - cached[0] > TENANT_LIST_TTL_S:
        cached = page.console.tenant_list = (now_s, await page.gw.store.list_tenants())
    return cached[1]


async def list_tenants(page: Page) -> Response:
    query = page.request.query_params.get("q", "").strip()
    tenants = await _all_tenants(page)
    matching = sorted((t for t in tenants if query.lower() in t.id.lower()), key=lambda t: t.id)
    pages = max(1, -(-len(matching) // PAGE_SIZE))
    number = min(_page_number(page.request.query_params.get("page", "1")), pages)
    shown = matching[(number - 1) * PAGE_SIZE : number * PAGE_SIZE]
    return page.render(
        "tenants.html",
        tenants=shown,
        total=len(tenants),
        matching=len(matching),
        query=query,
        number=number,
        pages=pages,
    )


async def create_tenant(page: Page) -> Response:
    body = tenant_body(page.form)
    body["id"] = page.form.get("id", "").strip()
    tenant = await new_tenant(page.gw.store, page.console.check_tenant, body)
    return redirect(f"/tenants/{tenant.id}", "created")


async def show_tenant(page: Page) -> Response:
    tenant = await _tenant(page)
    keys = await page.gw.store.list_keys(tenant.id)
    usage = await tenant_usage(page.gw.store, page.console.sampler, tenant, time.time())
    return page.render(
        "tenant.html", tenant=tenant, keys=keys, usage=usage, now_s=time.time(), models=sorted(page.gw.config.models)
    )


async def usage_fragment(page: Page) -> Response:
    """The live usage panel alone: console.js fetches it every few seconds and swaps it in."""
    tenant = await _tenant(page)
    usage = await tenant_usage(page.gw.store, page.console.sampler, tenant, time.time())
    return page.render("_usage.html", usage=usage)


async def update_tenant(page: Page) -> Response:
    tenant_id = page.request.path_params["tenant"]
    await change_tenant(page.gw.store, page.console.check_tenant, tenant_id, tenant_body(page.form))
    return redirect(f"/tenants/{tenant_id}", "saved")


async def delete_tenant(page: Page) -> Response:
    tenant = await _tenant(page)
    await remove_tenant(page.gw.store, tenant)
    return redirect("/tenants", "deleted")
