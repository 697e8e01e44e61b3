"""Helpers for the console's HTTP tests: a logged-in httpx client and the CSRF token read from a page."""

from __future__ import annotations

import re

import httpx

from tests.gateway.conftest import ADMIN_TOKEN

CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')


def console_client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url + "/admin", follow_redirects=False, timeout=20)


def logged_in(url: str) -> tuple[httpx.Client, str]:
    """A client holding a session cookie, and the session's CSRF token."""
    client = console_client(url)
    response = client.post("/login", data={"token": ADMIN_TOKEN, "next": "/admin/tenants"})
    assert response.status_code == 303, response.text
    return client, csrf_of(client.get("/tenants").text)


def csrf_of(html: str) -> str:
    found = CSRF_RE.search(html)
    assert found, "no CSRF token on the page"
    return found.group(1)
