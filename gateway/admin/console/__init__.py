"""The web admin console at /admin/: tenants, keys, live usage, replica pools and recent refusals, for an operator
with the admin token. Server-rendered (Jinja2, autoescaped) with one small script of its own for auto-refresh; the
templates and static files ship in the package. docs/console.md is the operator's guide.

    GET  /admin/                         -> the tenants page (or the login page)
    GET  /admin/login  POST /admin/login  POST /admin/logout
    GET  /admin/tenants  POST /admin/tenants                         list (paged, ?q= filter), create
    GET  /admin/tenants/{t}  POST /admin/tenants/{t}                 the tenant's page, edit
    POST /admin/tenants/{t}/delete
    GET  /admin/tenants/{t}/usage                                    the live usage panel alone (auto-refresh)
    POST /admin/tenants/{t}/keys                                     issue: the key shown once
    POST /admin/tenants/{t}/keys/{k}/rotate|revoke|delete|expiry|limits
    GET  /admin/replicas  POST /admin/replicas/add|drain|remove
    GET  /admin/refusals                                             ?tenant= filter
    GET  /admin/static/...
"""

from __future__ import annotations

import functools
from pathlib import Path

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from gateway.admin.console import key_actions, login, refusal_page, replica_pages, tenant_pages
from gateway.admin.console.page import PREFIX, Console, Handler, page
from gateway.admin.console.types import ConsoleGateway

STATIC_DIR = Path(__file__).parent / "static"


def console_routes(gw: ConsoleGateway) -> list[BaseRoute]:
    """The console's routes, for `Mount("/admin", routes=...)` after the JSON API's /admin/v1."""
    console = Console(gw)

    def get(path: str, handler: Handler) -> Route:
        return Route(path, page(console, handler), methods=["GET"])

    def post(path: str, handler: Handler) -> Route:
        return Route(path, page(console, handler), methods=["POST"])

    async def home(request: Request) -> Response:
        return RedirectResponse(PREFIX + "/tenants", status_code=303)

    tenant = "/tenants/{tenant}"
    key = tenant + "/keys/{key_id}"
    return [
        Route("/", home, methods=["GET"]),
        Route("/login", functools.partial(login.login_form, console), methods=["GET"]),
        Route("/login", functools.partial(login.login, console), methods=["POST"]),
        post("/logout", login.logout),
        get("/tenants", tenant_pages.list_tenants),
        post("/tenants", tenant_pages.create_tenant),
        get(tenant, tenant_pages.show_tenant),
        post(tenant, tenant_pages.update_tenant),
        post(tenant + "/delete", tenant_pages.delete_tenant),
        get(tenant + "/usage", tenant_pages.usage_fragment),
        post(tenant + "/keys", key_actions.create_key),
        post(key + "/rotate", key_actions.rotate_key),
        post(key + "/revoke", key_actions.revoke_key),
        post(key + "/delete", key_actions.delete_key),
        post(key + "/expiry", key_actions.set_expiry),
        post(key + "/limits", key_actions.set_limits),
        get("/replicas", replica_pages.list_replicas),
        post("/replicas/add", replica_pages.add_replica),
        post("/replicas/drain", replica_pages.drain_replica),
        post("/replicas/remove", replica_pages.remove_replica),
        get("/refusals", refusal_page.list_refusals),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="console-static"),
    ]
