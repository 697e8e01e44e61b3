"""redis-server processes of a test's own with the transports and settings the store must handle: TLS with
certificates made by the test (openssl CLI), a unix socket, ACL users, and a slow data load after a restart.

RedisProcess (redis_process.py) covers the plain TCP server; this one takes any extra arguments and knows how to
reach the server over whichever transport it listens on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.gateway.servers import free_port

START_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Certificates:
    """A CA, a server certificate for 127.0.0.1 / localhost, and a client certificate, all signed by the CA."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=sluicegate-test-ca")
    (folder / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, ext in (("server", ["-extfile", "server.ext"]), ("client", [])):
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN=sluicegate-{name}")
        openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "2", *ext,
        )  # fmt: skip
    path = lambda name: str(folder / name)  # noqa: E731
    return Certificates(path("ca.crt"), path("server.crt"), path("server.key"), path("client.crt"), path("client.key"))


class RedisServer:
    """One redis-server on loopback: TCP on `port` unless `tls` (then TLS only) or `unix_socket` (then that only)."""

    def __init__(
        self,
        data_dir: Path,
        *extra_args: str,
        tls: Certificates | None = None,
        unix_socket: bool = False,
        username: str | None = None,
        password: str | None = None,
    ):
        self.port = free_port()
        self.dir = data_dir
        self.tls = tls
        self.socket_path = str(data_dir / "redis.sock") if unix_socket else None
        self.username, self.password = username, password  # what client() logs in as (an ACL user)
        self.extra_args = list(extra_args)
        self._proc: subprocess.Popen | None = None

    def _args(self) -> list[str]:
        args = ["redis-server", "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always"]  # a SIGKILLed server comes back with its data
        if self.socket_path:
            args += ["--port", "0", "--unixsocket", self.socket_path, "--unixsocketperm", "700"]
        elif self.tls:
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", self.tls.server_cert]
            args += ["--tls-key-file", self.tls.server_key, "--tls-ca-cert-file", self.tls.ca]
            args += ["--tls-auth-clients", "yes"]
        else:
            args += ["--port", str(self.port)]
        return args + self.extra_args

    def client(self, **kwargs) -> redis.Redis:
        """A redis-py client as `username` (or as `kwargs` says)."""
        options = {"username": self.username, "password": self.password, **kwargs}
        if self.socket_path:
            return redis.Redis(unix_socket_path=self.socket_path, **options)
        if self.tls:
            options.update(
                ssl=True, ssl_ca_certs=self.tls.ca, ssl_certfile=self.tls.client_cert, ssl_keyfile=self.tls.client_key
            )
        return redis.Redis(host="127.0.0.1", port=self.port, **options)

    def start(self, wait_loaded: bool = True) -> RedisServer:
        """`wait_loaded=False` returns once the server answers at all, LOADING included."""
        self._proc = subprocess.Popen(self._args(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        client = self.client()
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while True:
                try:
                    client.ping()
                    return self
                except redis.BusyLoadingError:
                    if not wait_loaded:
                        return self
                except redis.ConnectionError:
                    if self._proc.poll() is not None:
                        raise RuntimeError(f"redis-server exited: {self._proc.stderr.read().decode()}") from None
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.01)
        finally:
            client.close()

    def loading(self) -> bool:
        client = self.client()
        try:
            return client.info("persistence")["loading"] == 1
        finally:
            client.close()

    def pause(self) -> None:
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        assert self._proc is not None
        self._proc.kill()
        self._proc.wait()

    def stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            self.resume()
            self.kill()
        if self._proc and self._proc.stderr:
            self._proc.stderr.close()


def fill_for_slow_load(server: RedisServer, keys: int) -> None:
    """Write `keys` filler keys (db 15, away from the gateway's) and rewrite the AOF, so they sit in its RDB base,
    which a restart with `--key-load-delay` loads slowly (answering LOADING meanwhile)."""
    client = server.client(db=15)
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(keys):
            pipe.set(f"filler:{i}", "x")
        pipe.execute()
        client.bgrewriteaof()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            info = client.info("persistence")
            if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("AOF rewrite did not finish")
            time.sleep(0.02)
    finally:
        client.close()
