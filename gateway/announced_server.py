"""uvicorn's server, saying where it listens once its sockets are bound: at the gateway's default log level uvicorn
says nothing at all, and with `--port 0` only the bound sockets know the port. (One worker process; with `--workers`
uvicorn's own supervisor binds, and says so at `--log-level info`.)"""

from __future__ import annotations

import socket
import sys

import uvicorn

from sluicegate.addresses import listening_urls


class AnnouncedServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, served: str) -> None:
        super().__init__(config)
        self._served = served
        """What the line adds after the addresses (the models, where quotas live)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)  # exits the process (status 3) when it cannot bind
        print(f"sluicegate gateway: listening on {listening_urls(self.servers)} ({self._served})", file=sys.stderr)
        sys.stderr.flush()
