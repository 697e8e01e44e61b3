"""uvicorn's server, saying where it listens once its socket is bound: at the gateway's default log level uvicorn
says nothing at all, and with `--port 0` only the bound socket knows the port."""

from __future__ import annotations

import socket
import sys

import uvicorn


class AnnouncedServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, served: str) -> None:
        super().__init__(config)
        self._served = served
        """What the line adds after the address (the models, where quotas live)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1]
            print(
                f"sluicegate gateway: listening on http://{self.config.host}:{port} ({self._served})", file=sys.stderr
            )
            sys.stderr.flush()
