"""Logging in and out. The login form takes the admin token, the same one the JSON admin API takes as a bearer;
a wrong one gets one plain sentence, whatever was wrong with it."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.admin.console.forms import parse_form
from gateway.admin.console.page import PREFIX, Console, Page, redirect
from gateway.admin.console.session import COOKIE_NAME, SESSION_TTL_S
from gateway.errors import ApiError


def _next_path(raw: str) -> str:
    """Where to go after logging in: a console path only (never another site: no open redirect)."""
    if raw.startswith(PREFIX + "/") and not raw.startswith("//") and "\\" not in raw and ":" not in raw:
        return raw
    return PREFIX + "/tenants"


async def login_form(console: Console, request: Request) -> Response:
    if not console.enabled:
        return console.render(request, "disabled.html", 404)
    return console.render(request, "login.html", next_path=_next_path(request.query_params.get("next", "")))


async def login(console: Console, request: Request) -> Response:
    if not console.enabled:
        return console.render(request, "disabled.html", 404)
    try:
        form = parse_form(await request.body())
    except ApiError:
        form = {}
    next_path = _next_path(form.get("next", ""))
    if not console.signer.token_ok(form.get("token", "")):
        return console.render(request, "login.html", 401, error="That admin token is not valid.", next_path=next_path)
    _, cookie = console.signer.issue(time.time())
    response = RedirectResponse(next_path, status_code=303)
    response.set_cookie(
        COOKIE_NAME,
        cookie,
        max_age=SESSION_TTL_S,
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def logout(page: Page) -> Response:
    response = redirect("/login", "logged_out")
    response.delete_cookie(COOKIE_NAME, path=PREFIX, httponly=True, samesite="strict")
    return response
