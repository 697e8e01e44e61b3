"""Which admissions may overlap the upstream request (request path step 5, docs/architecture.md).

The admission script is the request's one Redis round trip before routing (~0.15-0.25 ms on loopback, more to a
Redis on another host). When this gateway's last answer for an API key left at least MIN_FREE_FRACTION of every
limit free (each bucket, the tenant's concurrency and its daily and monthly budgets, after this request too), the
script will all but certainly admit the request, so the gateway sends it upstream while the script runs and holds
the response back until the script answers. Should it refuse after all (other gateways drained the buckets in
between), the upstream connection is closed, which aborts the request there, and the client gets the refusal it
would have got. A key with less free, refused or admitted on fail-open local buckets last time, or not seen for
MAX_VIEW_AGE_S, is admitted first, as before: a tenant at or over a limit never costs an upstream any work.

Each overlapped request takes its own needs out of the key's last view, so a burst on this gateway cannot ride on
one stale answer; the next answer from Redis replaces the view.
"""

from __future__ import annotations

import time

from gateway.store import base
from gateway.store.base import Admission

MIN_FREE_FRACTION = 0.25
MAX_VIEW_AGE_S = 1.0
MAX_KEYS = 100_000


class OverlapGate:
    def __init__(self, enabled: bool):
        self.enabled = enabled
        # key digest -> (monotonic s of the answer, {limit name: [limit, left]})
        self._views: dict[str, tuple[float, dict[str, list[int]]]] = {}

    def allows(self, digest: str, prompt_tokens: int, reserved_out: int) -> bool:
        """True: send upstream without waiting for the admission script. Takes this request's needs from the view."""
        if not self.enabled:
            return False
        entry = self._views.get(digest)
        if entry is None:
            return False
        seen_at, left = entry
        if time.monotonic() - seen_at > MAX_VIEW_AGE_S:
            del self._views[digest]
            return False
        total = prompt_tokens + reserved_out
        needs = {base.REQUESTS: 1, base.INPUT_TOKENS: prompt_tokens, base.OUTPUT_TOKENS: reserved_out,
                 "concurrency": 1, "daily_tokens": total, "monthly_tokens": total}  # the names of base.HEADROOM
        for name, (limit, free) in left.items():
            if free - needs[name] < limit * MIN_FREE_FRACTION:
                return False
        for name, pair in left.items():
            pair[1] -= needs[name]
        return True

    def observe(self, digest: str, admission: Admission) -> None:
        """The store's answer for this key: the next requests' view (or none, after a refusal or a fallback)."""
        if not self.enabled:
            return
        if not admission.ok or admission.fallback:
            self._views.pop(digest, None)
            return
        if len(self._views) >= MAX_KEYS:
            self._views.clear()
        left = {name: [view.limit, view.remaining] for name, view in admission.buckets.items()}
        left.update((name, [limit, free]) for name, (limit, free) in admission.headroom.items())
        self._views[digest] = (time.monotonic(), left)
