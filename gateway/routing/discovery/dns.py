"""Replicas from DNS: the A/AAAA records of a name (a headless Service has one per ready Pod), or its SRV records.

NXDOMAIN and an empty answer are answers: the service has no replica now (scaled to zero, every Pod unready), so
the pool empties. A timeout or a failing resolver (SERVFAIL, refused) is not: DiscoveryError, and the last known
set keeps serving. No cache sits between the loop and the resolver, so each look-up sees the current records.
"""

from __future__ import annotations

import dns.asyncresolver
import dns.exception
import dns.nameserver
import dns.rdata
import dns.rdtypes.IN.SRV
import dns.resolver

from gateway.routing.discovery.config import DiscoveryConfig
from gateway.routing.discovery.source import DiscoveryError, Endpoint, address_name
from sluicegate.addresses import address_url

_ADDRESS_TYPES = ("A", "AAAA")


def make_resolver(config: DiscoveryConfig) -> dns.asyncresolver.Resolver:
    if config.nameservers is None:
        try:
            resolver = dns.asyncresolver.Resolver(configure=True)
        except dns.resolver.NoResolverConfiguration as exc:
            raise ValueError(f"discovery: no system resolver ({exc}); set discovery.nameservers") from None
    else:
        resolver = dns.asyncresolver.Resolver(configure=False)
        resolver.nameservers = [_nameserver(spec) for spec in config.nameservers]
    resolver.lifetime = config.timeout_s
    resolver.timeout = config.timeout_s
    return resolver


def _nameserver(spec: str) -> dns.nameserver.Nameserver:
    """`10.96.0.10`, `127.0.0.1:5353` or `[fd00::a]:53`."""
    host, port = spec, 53
    if spec.startswith("["):
        host, _, rest = spec[1:].partition("]")
        port = int(rest[1:]) if rest.startswith(":") else 53
    elif spec.count(":") == 1:
        host, _, port_text = spec.partition(":")
        port = int(port_text)
    return dns.nameserver.Do53Nameserver(host, port)


class DnsSource:
    """`discovery: {dns: NAME, port: P}` (address records) or `{srv: NAME}`."""

    def __init__(self, config: DiscoveryConfig, resolver: dns.asyncresolver.Resolver | None = None) -> None:
        self.config = config
        self.resolver = resolver or make_resolver(config)
        # A short name (`engine-headless`) finds the service through the Pod's search domains, as other clients do.
        self._search = config.nameservers is None

    async def resolve(self) -> frozenset[Endpoint]:
        if self.config.srv is not None:
            return await self._srv(self.config.srv)
        assert self.config.dns is not None and self.config.port is not None  # DiscoveryConfig checks it
        addresses = await self._addresses(self.config.dns)
        return frozenset(
            Endpoint(address_name(a, self.config.port), address_url(self.config.scheme, a, self.config.port))
            for a in addresses
        )

    async def close(self) -> None:
        pass  # dnspython opens a socket per query and closes it

    async def _addresses(self, name: str) -> list[str]:
        found: list[str] = []
        for rdtype in _ADDRESS_TYPES:
            answer = await self._query(name, rdtype)
            found.extend(sorted(record.to_text() for record in answer))
        return found

    async def _srv(self, name: str) -> frozenset[Endpoint]:
        srv_type = dns.rdtypes.IN.SRV.SRV
        answer = [r for r in await self._query(name, "SRV") if isinstance(r, srv_type)]
        records = sorted(answer, key=lambda r: (str(r.target), r.port))
        labels = [str(r.target).split(".", 1)[0] for r in records]
        endpoints: set[Endpoint] = set()
        for record, label in zip(records, labels):
            # The target is resolved here, through the same resolver, rather than by the HTTP client at request
            # time: both then see the same records, and a Pod that moved gets a new URL (re-added by the loop).
            addresses = await self._addresses(str(record.target))
            if not addresses:
                continue  # the target is gone already: so is the replica
            # Name after the host (`engine-0` of engine-0.engine.ns.svc), with the port where a host has several.
            replica = label if labels.count(label) == 1 else f"{label}-{record.port}"
            endpoints.add(Endpoint(replica, address_url(self.config.scheme, addresses[0], record.port)))
        return frozenset(endpoints)

    async def _query(self, name: str, rdtype: str) -> list[dns.rdata.Rdata]:
        try:
            answer = await self.resolver.resolve(name, rdtype, search=self._search)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return []
        except dns.exception.DNSException as exc:  # timeout, SERVFAIL, refused, no nameserver answered
            raise DiscoveryError(f"DNS {rdtype} {name}: {exc.__class__.__name__}: {exc}") from None
        return list(answer)
