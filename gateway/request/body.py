"""The body the gateway sends upstream: the client's, with what admission decided added (the reserved `max_tokens`
as a cap, usage in the stream, the tenant's cache salt), spliced into the client's bytes where it can be."""

from __future__ import annotations

import json
from typing import Any

from gateway.request.context import RequestContext


def cache_salt(ctx: RequestContext) -> str:
    """Prefix-cache salt, never empty: the tenant's own (its id), or its cache group's (docs/architecture.md, "Tenant
    isolation"). A client's own cache_salt narrows it further and is namespaced by it, so no client can pick another
    tenant's chain. The router hashes with this same salt (attempt.py), so a group's requests still meet on the
    replica that holds their shared prefix."""
    client_salt = ctx.parsed.body.get("cache_salt")
    if isinstance(client_salt, str) and client_salt:
        return f"{ctx.tenant.cache_salt}/{client_salt}"
    return ctx.tenant.cache_salt


def upstream_body(ctx: RequestContext, salt: str, max_len: int | None) -> bytes:
    body = ctx.parsed.body
    changes: dict[str, Any] = {}
    if ctx.model.upstream_model:
        changes["model"] = ctx.model.upstream_model
    if ctx.parsed.max_tokens is None:
        # What admission reserved is also the cap: without one the upstream may generate to the end of the
        # context, far past the tenant's output bucket and budgets (within the context, or the upstream refuses it).
        cap = ctx.tenant.default_max_tokens
        changes["max_tokens"] = cap if max_len is None else max(1, min(cap, max_len - ctx.prompt.longest_prompt_tokens))
    if ctx.parsed.stream and not ctx.parsed.client_wants_usage:
        changes["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    if salt != (body.get("cache_salt") or ""):
        changes["cache_salt"] = salt
    if ctx.parsed.body is ctx.parsed.original_body:  # the input hook changed nothing: the client's bytes go upstream
        if not changes:
            return ctx.raw_body
        # UTF-8 JSON never holds a raw NUL: one means UTF-16/32, which json.loads takes but a splice would corrupt
        if not any(name in body for name in changes) and b"\x00" not in ctx.raw_body:
            return splice(ctx.raw_body, changes)
    return json.dumps({**body, **changes}).encode()


def splice(raw_body: bytes, members: dict[str, Any]) -> bytes:
    """`raw_body` (a JSON object with at least one member) with `members` (names it lacks) added after its opening
    brace: re-encoding a long prompt costs ~5 us per KB on the event loop, this costs a copy."""
    start = raw_body.index(b"{") + 1
    return raw_body[:start] + json.dumps(members)[1:-1].encode() + b"," + raw_body[start:]
