"""What a discovery source answers (a set of `Endpoint`s) and how it fails (`DiscoveryError`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class DiscoveryError(Exception):
    """The source could not answer now (resolver down, API unreachable, bad reply): keep the last known set."""


@dataclass(frozen=True, order=True)
class Endpoint:
    """One replica as a source sees it: a stable name (admin API key, metrics label) and its base URL."""

    name: str
    url: str


class DiscoverySource(Protocol):
    async def resolve(self) -> frozenset[Endpoint]:
        """The replicas serving now (empty when the service has none); DiscoveryError when that is unknown."""

    async def close(self) -> None: ...


def address_name(host: str, port: int) -> str:
    """A replica name from an address: `10.0.0.5-8100`; an IPv6 address's colons become underscores, since a name
    is a URL path segment and a metrics label (gateway/admin/replicas.py, REPLICA_NAME_RE)."""
    return f"{host.replace(':', '_')}-{port}"[:64]
