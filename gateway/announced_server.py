"""uvicorn's server, saying where it listens once its sockets are bound: at the gateway's default log level uvicorn
says nothing at all, and with `--port 0` only the bound sockets know the port. (One worker process; with `--workers`
uvicorn's own supervisor binds, and says so at `--log-level info`.)"""

from __future__ import annotations

import socket
import sys

import uvicorn


class AnnouncedServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, served: str) -> None:
        super().__init__(config)
        self._served = served
        """What the line adds after the addresses (the models, where quotas live)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)  # exits the process (status 3) when it cannot bind
        bound = [sock.getsockname() for server in self.servers for sock in server.sockets]
        urls = " ".join(_url(address[0], address[1]) for address in bound)
        print(f"sluicegate gateway: listening on {urls} ({self._served})", file=sys.stderr)
        sys.stderr.flush()


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
