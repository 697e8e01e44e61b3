"""The body the gateway sends upstream: the client's, with what admission decided added (the reserved `max_tokens`
as a cap, usage in the stream, the tenant's cache salt), spliced into the client's bytes where it can be. A
disaggregated request's two hops (docs/architecture.md, "Disaggregated prefill and decode") send `prefill_body`, then
the same body with the prefill's handoff (`with_handoff`)."""

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


KV_TRANSFER_PARAMS = "kv_transfer_params"
_PREFILL_FIELDS: dict[str, Any] = {
    "stream": False,
    "max_tokens": 1,
    "n": 1,
    KV_TRANSFER_PARAMS: {"do_remote_decode": True},
}
# min_tokens too: above the prefill's max_tokens of 1 an upstream may refuse it, and its one token is thrown away.
_NOT_FOR_PREFILL = ("stream_options", "max_completion_tokens", "min_tokens")


def upstream_changes(ctx: RequestContext, salt: str, max_len: int | None) -> dict[str, Any]:
    """The members admission adds to the client's body, or replaces in it."""
    body = ctx.parsed.body
    changes: dict[str, Any] = {}
    if ctx.model.upstream_model:
        changes["model"] = ctx.model.upstream_model
    if ctx.parsed.max_tokens is None:
        # What admission reserved is also the cap: without one the upstream may generate to the end of the
        # context, far past the tenant's output bucket and budgets (within the context, or the upstream refuses it).
        cap = ctx.tenant.default_reservation
        changes["max_tokens"] = cap if max_len is None else max(1, min(cap, max_len - ctx.prompt.longest_prompt_tokens))
    if ctx.parsed.stream and not ctx.parsed.client_wants_usage:
        changes["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    if salt != (body.get("cache_salt") or ""):
        changes["cache_salt"] = salt
    return changes


def upstream_body(ctx: RequestContext, changes: dict[str, Any]) -> bytes:
    """The client's body with `changes` (upstream_changes)."""
    body = ctx.parsed.body
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


def prefill_body(ctx: RequestContext, changes: dict[str, Any]) -> bytes:
    """Hop 1: the body of the decode hop, made to stop after the prompt's prefill (one token, not streamed, one
    choice) and to hand the prompt's KV over (`do_remote_decode`)."""
    body = {**ctx.parsed.body, **changes, **_PREFILL_FIELDS}
    for name in _NOT_FOR_PREFILL:
        body.pop(name, None)
    return json.dumps(body).encode()


def with_handoff(body: bytes, kv_transfer_params: dict[str, Any]) -> bytes:
    """Hop 2: `body` (upstream_body's: a UTF-8 JSON object, the cache salt among its members, and never a client's
    kv_transfer_params, which parse.py refuses) with the prefill replica's kv_transfer_params, unchanged."""
    return splice(body, {KV_TRANSFER_PARAMS: kv_transfer_params})


def handed_over_tokens(kv_transfer_params: dict[str, Any]) -> int:
    """The prompt tokens a prefill replica's handoff covers (`remote_num_tokens`), for the decode hop's load
    estimate; 0 when the answer does not say (the decode replica checks the handoff itself)."""
    tokens = kv_transfer_params.get("remote_num_tokens")
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0 else 0
