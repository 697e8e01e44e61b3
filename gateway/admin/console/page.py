"""What every console page shares: the session check, the CSRF check on every POST, rendering with autoescaped
Jinja2 templates, security headers, and the admin API's errors shown as a page.

    GET   no valid session: 303 to the login page
    POST  no valid session: 401, nothing done;  a session but no valid CSRF token: 403, nothing done
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from gateway.admin import audit
from gateway.admin.api import tenant_checker
from gateway.admin.console.forms import Form, parse_form
from gateway.admin.console.session import COOKIE_NAME, Session, SessionSigner
from gateway.admin.console.types import ConsoleGateway
from gateway.admin.console.usage import UsageSampler
from gateway.admin.tenants import CheckTenant, Tenant
from gateway.errors import ApiError
from gateway.store.base import StoreUnavailable

PREFIX = "/admin"
"""Where app.py mounts the console; links and redirects are built from it."""
TEMPLATES_DIR = Path(__file__).parent / "templates"
SECURITY_HEADERS = {
    # Scripts and styles only from the console's own static files: no inline script, nothing from elsewhere.
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",  # pages hold limits and, once, a key: never cached
}
DONE_MESSAGES = {
    "created": "Created.",
    "saved": "Saved.",
    "deleted": "Deleted.",
    "revoked": "Key revoked.",
    "expiry": "Key expiry changed.",
    "limits": "Key limits changed.",
    "added": "Replica added.",
    "drained": "Replica draining: it takes no new requests.",
    "removed": "Replica removing: it goes once its last request ends.",
    "logged_out": "Logged out.",
}
"""What a redirect's `done` names: fixed texts, so a crafted link cannot put words on the page."""


class Console:
    """The console's long-lived parts, built once per app."""

    def __init__(self, gw: ConsoleGateway) -> None:
        self.gw = gw
        self.signer = SessionSigner(gw.config.admin_token or "")
        self.check_tenant: CheckTenant = tenant_checker(gw)
        self.sampler = UsageSampler()
        self.tenant_list: tuple[float, list[Tenant]] | None = None
        """(monotonic s read, every tenant): the list pages' copy (tenant_pages.py); a console write drops it."""
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.globals.update(prefix=PREFIX, quote=quote, fmt_time=_fmt_time)

    @property
    def enabled(self) -> bool:
        return bool(self.gw.config.admin_token)

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        context.setdefault("csrf", "")
        context.setdefault("logged_in", False)
        context.setdefault("error", "")
        done = request.query_params.get("done", "")
        context.setdefault("notice", DONE_MESSAGES.get(done, ""))
        html = self.templates.get_template(template).render(request=request, **context)
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


@dataclass
class Page:
    """One logged-in request: its session, its checked form (POST) and the console."""

    request: Request
    console: Console
    session: Session
    form: Form = field(default_factory=dict)

    @property
    def gw(self) -> ConsoleGateway:
        return self.console.gw

    def render(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        csrf = self.console.signer.csrf_token(self.session)
        return self.console.render(self.request, template, status, csrf=csrf, logged_in=True, **context)


def redirect(path: str, done: str = "") -> RedirectResponse:
    """303 to a console path (after a POST: the browser GETs it, so a reload does not repeat the action)."""
    return RedirectResponse(PREFIX + path + (f"?done={done}" if done else ""), status_code=303)


Handler = Callable[[Page], Awaitable[Response]]


def page(console: Console, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def run(request: Request) -> Response:
        if not console.enabled:
            return console.render(request, "disabled.html", 404)
        session = console.signer.verify(request.cookies.get(COOKIE_NAME), time.time())
        post = request.method == "POST"
        if session is None:
            if not post:
                return RedirectResponse(f"{PREFIX}/login?next={quote(request.url.path)}", status_code=303)
            message = "Your session has ended; log in again. Nothing was changed."
            return console.render(request, "login.html", 401, error=message, next_path="")
        form: Form = {}
        try:
            if post:
                form = parse_form(await request.body())
                if not console.signer.csrf_ok(session, form.get("csrf")):
                    message = "This form is stale or did not come from the console. Reload the page and try again."
                    raise ApiError(403, message, code="csrf_failed")
            with audit.acting_as(audit.client_address(request)):  # who, for the audit log (admin/audit.py)
                response = await handler(Page(request, console, session, form))
        except ApiError as error:
            return Page(request, console, session).render("error.html", error.status, error=error)
        except StoreUnavailable:
            down = ApiError(503, "The store (Redis) is unreachable; try again shortly.", code="service_unavailable")
            return Page(request, console, session).render("error.html", 503, error=down)
        if post:
            console.tenant_list = None
        if post and "tenant" in request.path_params:
            console.gw.admin_changed(request.path_params["tenant"])
        return response

    return run


def _fmt_time(unix_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix_s)) if unix_s else "never"
