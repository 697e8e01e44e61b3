"""The cheap pre-check (request path step 2): a key whose request bucket the store found empty is refused locally
for up to PRECHECK_MAX_S, so an over-limit key costs neither tokenization nor more than one store call a second."""

from __future__ import annotations

import time
from dataclasses import dataclass

PRECHECK_MAX_S = 1.0
"""A local refusal stands at most this long before the store is asked again, so an admin change made through
another gateway instance (a raised limit) shows within it; the instance that took the change drops it at once."""
MAX_DENIED_KEYS = 100_000


@dataclass(frozen=True, slots=True)
class Denial:
    """A key refused for an empty request bucket, as the store last reported it."""

    recheck_at_s: float
    """Monotonic s after which the store is asked again."""
    refill_at_s: float
    """Monotonic s at which the request bucket has a request again (Retry-After counts down to it)."""
    tenant_id: str
    headers: dict[str, str]
    """The refusal's x-ratelimit-* headers: the buckets stay as reported until refill_at_s."""
    requests_limit: int
    """The request bucket's limit (the tighter of the key's and the tenant's rpm), for the refusal's message."""


class DeniedKeys:
    def __init__(self) -> None:
        self._by_digest: dict[str, Denial] = {}

    def standing(self, digest: str, now_s: float) -> Denial | None:
        """The key's denial while it still stands, else None (and a lapsed one is dropped)."""
        denial = self._by_digest.get(digest)
        if denial is None:
            return None
        if now_s >= denial.recheck_at_s:
            del self._by_digest[digest]
            return None
        return denial

    def deny(
        self, digest: str, tenant_id: str, retry_after_s: float, headers: dict[str, str], requests_limit: int
    ) -> None:
        if len(self._by_digest) >= MAX_DENIED_KEYS:  # keys that never come back would pile up
            self._by_digest.clear()
        now_s = time.monotonic()
        self._by_digest[digest] = Denial(
            now_s + min(retry_after_s, PRECHECK_MAX_S), now_s + retry_after_s, tenant_id, headers, requests_limit
        )

    def forget_tenant(self, tenant_id: str) -> None:
        """An admin changed the tenant: its keys' next requests go to the store."""
        for digest in [d for d, denial in self._by_digest.items() if denial.tenant_id == tenant_id]:
            del self._by_digest[digest]
