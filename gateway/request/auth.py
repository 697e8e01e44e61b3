"""API key -> (key record, tenant), cached in-process.

Freshness without a round trip of its own: the admission script re-checks the key (revoked, expired, deleted),
the model and every limit from Redis, and returns the tenant's generation counter; when that differs from the
cached tenant's, the request path calls `refresh_tenant` before going on. So an admin change takes effect on the
next request on every gateway instance, and an unchanged tenant costs no extra Redis call.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from gateway.admin.tenants import ApiKey, Tenant, digest_key
from gateway.errors import unauthorized, unavailable
from gateway.store.base import StoreUnavailable

T = TypeVar("T")

MAX_CACHED_KEYS = 100_000
DEAD_KEY_RECHECK_S = 1.0
"""A key cached as revoked or expired is looked up again after this long: an admin may have extended it (through
another gateway instance; the instance that took the change forgets the key at once)."""


class KeyStore(Protocol):
    async def get_key(self, digest: str) -> ApiKey | None: ...

    async def get_tenant(self, tenant_id: str) -> Tenant | None: ...


class AuthCache:
    def __init__(self, store: KeyStore) -> None:
        self._store = store
        self._keys: dict[str, tuple[ApiKey, float]] = {}  # digest -> (key record, monotonic s it was fetched)
        self._tenants: dict[str, Tenant] = {}

    async def authenticate(self, authorization: bytes | None) -> tuple[ApiKey, Tenant]:
        if not authorization or not authorization[:7].lower() == b"bearer ":
            raise unauthorized("Missing bearer API key (Authorization: Bearer <key>).")
        digest = digest_key(authorization[7:].strip().decode("latin-1"))
        cached = self._keys.get(digest)
        if cached is not None and _dead(cached[0]) and time.monotonic() - cached[1] >= DEAD_KEY_RECHECK_S:
            cached = None
        if cached is None:
            key = await self._fetch(self._store.get_key, digest)
            if key is None:
                self._keys.pop(digest, None)
                raise unauthorized()
            if len(self._keys) >= MAX_CACHED_KEYS:
                self._keys.clear()
            self._keys[digest] = (key, time.monotonic())
        else:
            key = cached[0]
        # Known-dead keys are refused without a store call; the admission script is the authority for the rest.
        if _dead(key):
            raise unauthorized("This API key has been revoked or has expired.")
        tenant = self._tenants.get(key.tenant_id)
        if tenant is None:
            tenant = await self.refresh_tenant(key.tenant_id)
        return key, tenant

    async def authenticate_fresh(self, authorization: bytes | None) -> tuple[ApiKey, Tenant]:
        """For paths off the hot one (/v1/models): the key record is read from the store, not the cache, so a key
        revoked through another instance is refused here at once (no admission script runs to catch it)."""
        if authorization and authorization[:7].lower() == b"bearer ":
            self.forget_key(digest_key(authorization[7:].strip().decode("latin-1")))
        return await self.authenticate(authorization)

    async def refresh_tenant(self, tenant_id: str) -> Tenant:
        tenant = await self._fetch(self._store.get_tenant, tenant_id)
        if tenant is None:
            self._tenants.pop(tenant_id, None)
            raise unauthorized("This API key's tenant no longer exists.")
        self._tenants[tenant_id] = tenant
        return tenant

    def forget_key(self, digest: str) -> None:
        """The store refused the key (revoked, expired, deleted): look it up again next time."""
        self._keys.pop(digest, None)

    def forget_tenant(self, tenant_id: str) -> None:
        """An admin changed the tenant or its keys: look them up again next time."""
        self._tenants.pop(tenant_id, None)
        for digest in [d for d, (key, _) in self._keys.items() if key.tenant_id == tenant_id]:
            del self._keys[digest]

    async def _fetch(self, fn: Callable[[str], Awaitable[T | None]], arg: str) -> T | None:
        try:
            return await fn(arg)
        except StoreUnavailable:
            raise unavailable("The key store is unreachable; retry shortly.") from None


def _dead(key: ApiKey) -> bool:
    return key.revoked or bool(key.expires_at and key.expires_at <= time.time())
