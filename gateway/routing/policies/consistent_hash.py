"""Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam 2018).

Each replica owns `virtual_nodes` points on a 64-bit ring. A request's key is the hash of its first
`hash_key_blocks` blocks (a chain hash, so it names that whole prefix): requests that share that prefix land on
the same replica, and adding or removing a replica moves only the keys next to its points. Walking clockwise from
the key, the request goes to the first replica whose in-flight count stays within
ceil(max_load_ratio * (total + 1) / n) + slack (`load_cap`), so a hot prefix spills to its ring
neighbours instead of overloading its owner.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Sequence

import xxhash

from gateway.routing.policies.base import Candidate, Choice, PolicyRequest, load_cap


class ConsistentHashPolicy:
    name = "consistent_hash"

    def __init__(
        self,
        max_load_ratio: float = 1.25,
        hash_key_blocks: int = 4,
        virtual_nodes: int = 64,
        max_load_slack_requests: int = 0,
    ) -> None:
        self.max_load_ratio = max_load_ratio
        self.max_load_slack_requests = max_load_slack_requests
        self.hash_key_blocks = hash_key_blocks
        self.virtual_nodes = virtual_nodes
        self._ring_names: set[str] = set()
        self._ring: list[tuple[int, str]] = []  # sorted (point, replica name)

    def choose(self, request: PolicyRequest, candidates: Sequence[Candidate]) -> Choice:
        position = {c.name: i for i, c in enumerate(candidates)}
        self._ensure_ring(position)
        cap = load_cap(candidates, self.max_load_ratio, self.max_load_slack_requests)
        start = bisect.bisect_left(self._ring, (self._key(request), ""))
        first = True
        for step in range(len(self._ring)):
            index = position.get(self._ring[(start + step) % len(self._ring)][1])
            if index is None:  # not a candidate now (excluded for a retry, breaker open): its points are skipped
                continue
            if candidates[index].load.inflight_requests + 1 <= cap:
                return Choice(index=index, reason="hash" if first else "load")
            first = False
        lightest = min(range(len(candidates)), key=lambda i: candidates[i].load.inflight_requests)
        return Choice(index=lightest, reason="load")

    def _key(self, request: PolicyRequest) -> int:
        if request.block_hashes:
            key = request.block_hashes[min(len(request.block_hashes), self.hash_key_blocks) - 1]
        else:
            key = request.fallback_key
        # Re-mixed: block hashes are uniform already, but ids from other sources (trace replays) need not be.
        return xxhash.xxh3_64_intdigest(key.to_bytes(8, "little", signed=False))

    def _ensure_ring(self, names: Collection[str]) -> None:
        """The ring holds every candidate (skipping a replica's points is the same as a ring without it), so it is
        rebuilt only when a replica it lacks appears, not each time the candidate set shrinks and grows back."""
        if self._ring_names.issuperset(names):
            return
        self._ring_names = set(names)
        self._ring = sorted(
            (xxhash.xxh3_64_intdigest(f"{name}#{v}".encode()), name)
            for name in names
            for v in range(self.virtual_nodes)
        )
