"""Real servers on loopback for tests: uvicorn in a background thread on a free port."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn


class ThreadServer:
    """`app` on host:port (port 0: a free one); TLS when given a certificate and its key."""

    def __init__(
        self,
        app,
        lifespan: str = "on",
        host: str = "127.0.0.1",
        port: int = 0,
        certfile=None,
        keyfile=None,
        keep_alive_s: int = 5,
    ):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.port = self._sock.getsockname()[1]
        self.url = f"{'https' if certfile else 'http'}://{host}:{self.port}"
        tls = {"ssl_certfile": str(certfile), "ssl_keyfile": str(keyfile)} if certfile else {}
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan=lifespan,
            loop="asyncio",
            access_log=False,
            timeout_graceful_shutdown=2,
            timeout_keep_alive=keep_alive_s,
            **tls,
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> ThreadServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
