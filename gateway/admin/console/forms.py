"""HTML form bodies (application/x-www-form-urlencoded) read and turned into the admin API's update bodies, so the
console's writes pass exactly the validation the JSON API's do (tenants.py, api.py).

A form field left empty means "no limit" for a limit (0, as the API writes it) and "never" for an expiry.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from gateway.admin.tenants import KEY_INT_FIELDS, TENANT_INT_FIELDS, TENANT_USD_FIELDS
from gateway.errors import ApiError, invalid_request

MAX_FORM_BYTES = 64 * 1024
"""The largest form the console takes: its biggest (a tenant with its models) is a few hundred bytes."""
MAX_FORM_FIELDS = 64

Form = dict[str, str]


def parse_form(raw: bytes) -> Form:
    """The form's fields (the last value of a repeated one); a 413 for an oversized body, a 400 for a malformed one."""
    if len(raw) > MAX_FORM_BYTES:
        raise ApiError(413, "The form is too large.", code="form_too_large")
    try:
        pairs = urllib.parse.parse_qsl(
            raw.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_FORM_FIELDS
        )
    except (UnicodeDecodeError, ValueError):
        raise invalid_request("The form could not be read.") from None
    return dict(pairs)


def _number(form: Form, name: str, cast: type[int] | type[float], empty: float) -> float:
    text = form.get(name, "").strip()
    if not text:
        return empty
    try:
        return cast(text)
    except ValueError:
        raise invalid_request(f"{name} must be a number, got {text!r}", param=name) from None


def limit_fields(form: Form, names: tuple[str, ...]) -> dict[str, Any]:
    """The integer fields among `names` the form carries (empty: 0, no limit)."""
    return {name: int(_number(form, name, int, 0)) for name in names if name in form}


def tenant_body(form: Form) -> dict[str, Any]:
    """A tenant create or edit form as the API's body: limits, budgets, guardrail policy, cache group, models."""
    body = limit_fields(form, TENANT_INT_FIELDS)
    body.update({name: _number(form, name, float, 0.0) for name in TENANT_USD_FIELDS if name in form})
    if not form.get("default_max_tokens", "x").strip():
        del body["default_max_tokens"]  # left empty: keep the default reservation rather than refuse 0
    if "guardrails" in form:
        body["guardrails"] = form["guardrails"].strip() or "off"
    if "models" in form:
        body["models"] = [m for m in form["models"].replace(",", " ").split() if m]
    if "cache_group" in form:
        body["cache_group"] = form["cache_group"].strip()  # empty: the tenant's prefix cache is its own
    return body


def key_body(form: Form) -> dict[str, Any]:
    """A key form as the API's body: name, per-key limits, expiry as hours from now (`ttl_h`, empty: never)."""
    body = limit_fields(form, KEY_INT_FIELDS)
    if "name" in form:
        body["name"] = form["name"].strip()
    body.update(expiry_body(form))
    return body


def expiry_body(form: Form) -> dict[str, Any]:
    """`ttl_h` as the API's expiry: `ttl_s`, or `expires_at` 0 (never) when left empty or 0."""
    if "ttl_h" not in form:
        return {}
    ttl_h = _number(form, "ttl_h", float, 0.0)
    if ttl_h < 0:
        raise invalid_request(f"ttl_h must not be negative, got {ttl_h}", param="ttl_h")
    return {"ttl_s": ttl_h * 3600} if ttl_h else {"expires_at": 0.0}


def grace_s(form: Form, default_s: float) -> float:
    return _number(form, "grace_s", float, default_s)
