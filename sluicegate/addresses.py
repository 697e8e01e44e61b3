"""Addresses as URLs, for every side: replicas a discovery source found, and the sockets a server bound."""

from __future__ import annotations

import ipaddress
from asyncio import Server
from collections.abc import Iterable


def address_url(scheme: str, host: str, port: int) -> str:
    """http://10.0.0.5:8100, http://[fd00::5]:8100 or http://engine-0.engine.ns.svc:8100."""
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass  # a host name
    return f"{scheme}://{host}:{port}"


def listening_urls(servers: Iterable[Server]) -> str:
    """Every socket the servers bound, as http URLs: with port 0 only the sockets know the port."""
    bound = [sock.getsockname() for server in servers for sock in server.sockets]
    return " ".join(address_url("http", address[0], address[1]) for address in bound)
