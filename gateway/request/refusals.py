"""The last requests this gateway process refused (bad key, bad body, limits, budgets, guardrails), kept in a
bounded ring so the admin console can say why a tenant's requests fail without a log search. The ring lives in the
process: each gateway instance (and each `--workers` process) shows its own refusals.

Recording is on the error path only and costs a deque append (plus one sha256 when the refusal came before the key
was resolved, so that the console can still name the key); the plaintext key is never kept.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

from gateway.admin.tenants import digest_key, key_id_of
from gateway.errors import ApiError
from gateway.request.context import RequestContext

DEFAULT_CAPACITY = 500
"""Refusals kept per process; older ones drop off."""


@dataclass(frozen=True, slots=True)
class Refusal:
    at_s: float
    """Unix seconds when the refusal was answered."""
    status: int
    code: str
    type: str
    message: str
    tenant_id: str
    """'' when the request never reached its key (no key, or refused before auth finished)."""
    key_id: str
    """The key's public id (k_...); '' when the request carried no bearer key."""
    key_name: str
    digest: str
    """The key's sha256, so a reader can look up a key the request path had not resolved yet ('' without a key)."""


class RefusalLog:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._ring: collections.deque[Refusal] = collections.deque(maxlen=capacity)

    def record(self, ctx: RequestContext, error: ApiError, authorization: bytes | None) -> None:
        """`authorization`: the request's header, read only when the request path had not resolved the key."""
        tenant_id = key_id = key_name = digest = ""
        if ctx.authed:
            tenant_id, key_id, key_name, digest = ctx.tenant.id, ctx.key.key_id, ctx.key.name, ctx.key.digest
        elif authorization and authorization[:7].lower() == b"bearer ":
            digest = digest_key(authorization[7:].strip().decode("latin-1"))
            key_id = key_id_of(digest)
        self._ring.append(
            Refusal(
                time.time(),
                error.status,
                error.code or "",
                error.type,
                error.message,
                tenant_id,
                key_id,
                key_name,
                digest,
            )
        )

    def recent(self, limit: int | None = None) -> list[Refusal]:
        """Newest first."""
        newest = list(reversed(self._ring))
        return newest if limit is None else newest[:limit]
