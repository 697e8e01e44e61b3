"""A minimal pipelined Redis client for the two hot-path scripts (admission and settlement).

Why not redis-py here: its asyncio client costs ~175 us of CPU per PING and ~350 us per EVALSHA on this machine
(connection-pool checkout, command packing, parser layers); this one writes each command on one shared
connection as it comes and matches replies in order (natural pipelining under load), ~40 us per call.

Every call has a deadline (`timeout_s`). A missed deadline, a lost connection or a refused connect fails the
calls in flight with StoreUnavailable and drops the connection; the next call reconnects. The transport (TCP, TLS,
unix socket; ACL user, db) is the `RedisEndpoint`'s (redis_url.py), the same one redis-py's admin pool uses.
One RespClient speaks to one server; cluster.py and sentinel.py route over several of them.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import Iterable, Sequence
from functools import cached_property
from types import ModuleType
from typing import Any, Final, Protocol, cast

from gateway.store.base import StoreReplyLost, StoreUnavailable
from gateway.store.redis_url import RedisEndpoint, parse_redis_url
from gateway.store.slots import key_slot

Reply = Any
"""A decoded RESP2 reply: str | int | None | list of replies (an error reply is raised as RespError)."""


def _load_hiredis() -> ModuleType | None:
    try:  # C parser when installed (redis-py's optional speedup); the pure-Python one below otherwise
        import hiredis
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    return hiredis


hiredis = _load_hiredis()


class RespError(Exception):
    """An error reply from Redis (e.g. NOSCRIPT)."""

    @property
    def code(self) -> str:
        """The error's first word: NOSCRIPT, LOADING, ERR ..."""
        return str(self).split(" ", 1)[0]

    @property
    def is_outage(self) -> bool:
        """Redis refused to run the command for now (it will later, unchanged): an outage, not a rejection."""
        return self.code in OUTAGE_REPLIES


OUTAGE_REPLIES: Final = frozenset(
    {"LOADING", "BUSY", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS"}
)
"""Error replies that mean "not now" rather than "never": loading its data after a restart, a script running past
busy-reply-threshold, a replica cut off from its master or one that was a master until a failover, a resharding
slot, a cluster without quorum, a master short of the in-sync replicas `min-replicas-to-write` asks for. None of
them ran the command (a script that hits READONLY or NOREPLICAS stops at its first write, which is its first
effect), so it can be sent again."""


_INCOMPLETE = object()


class _Reader(Protocol):
    def feed(self, data: bytes) -> None: ...

    def gets(self) -> Reply:
        """The next complete reply, or False when none is complete yet."""


class _PyReader:
    """RESP2 replies: + - : $ *  (bulk strings decoded as UTF-8)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def gets(self) -> Reply:
        reply, end = self._parse(0)
        if reply is _INCOMPLETE:
            return False
        del self._buf[:end]
        return reply

    def _parse(self, pos: int) -> tuple[Reply, int]:
        buf = self._buf
        line_end = buf.find(b"\r\n", pos)
        if line_end < 0:
            return _INCOMPLETE, pos
        kind, line, pos = buf[pos : pos + 1], bytes(buf[pos + 1 : line_end]), line_end + 2
        if kind == b"+":
            return line.decode(), pos
        if kind == b"-":
            return RespError(line.decode()), pos
        if kind == b":":
            return int(line), pos
        if kind == b"$":
            size = int(line)
            if size < 0:
                return None, pos
            if len(buf) < pos + size + 2:
                return _INCOMPLETE, pos
            return bytes(buf[pos : pos + size]).decode(), pos + size + 2
        if kind == b"*":
            count = int(line)
            if count < 0:
                return None, pos
            items: list[Reply] = []
            for _ in range(count):
                item, pos = self._parse(pos)
                if item is _INCOMPLETE:
                    return _INCOMPLETE, pos
                items.append(item)
            return items, pos
        raise StoreUnavailable(f"redis: unexpected reply type {kind!r}")


def _reader() -> _Reader:
    if hiredis is not None:
        reader: _Reader = hiredis.Reader(replyError=RespError, encoding="utf-8")
        return reader
    return _PyReader()


def encode_args(args: Iterable[object]) -> bytes:
    """RESP bulk strings, without the array header (so a constant head can be encoded once and reused)."""
    parts = []
    for arg in args:
        if not isinstance(arg, bytes):
            arg = str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


def encode_command(args: Sequence[object]) -> bytes:
    return b"*%d\r\n" % len(args) + encode_args(args)


class PreparedCommand:
    """A command whose leading arguments never change (EVALSHA sha numkeys KEYS...): encoded once."""

    def __init__(self, *head: object) -> None:
        self.count = len(head)
        self.head = encode_args(head)
        self.key = command_key(head)

    @cached_property
    def slot(self) -> int:
        """The Redis Cluster slot of its first key (cluster.py routes by it); computed once, on first use."""
        return key_slot(self.key or "")

    def encode(self, args: Sequence[object]) -> bytes:
        return b"*%d\r\n" % (self.count + len(args)) + self.head + encode_args(args)


def command_key(args: Sequence[object]) -> str | None:
    """The key a command is routed by: EVAL/EVALSHA's first key, the argument after the name otherwise."""
    if not args:
        return None
    name = str(args[0]).upper()
    if name in ("EVAL", "EVALSHA"):
        return str(args[3]) if len(args) > 3 and int(str(args[2])) > 0 else None
    return str(args[1]) if len(args) > 1 else None


_ASKING: Final = encode_command(["ASKING"])


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.pending: deque[asyncio.Future[Reply]] = deque()
        self.reader = _reader()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream connection (create_connection)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Pipelined small writes: without this, Nagle holds a command until the previous reply's ACK.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while True:
            reply = self.reader.gets()
            if reply is False:
                return
            future = self.pending.popleft()
            if not future.done():
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(StoreUnavailable(f"redis: connection lost ({exc!r})"))

    def fail(self, error: Exception) -> None:
        self.closed = True
        while self.pending:
            future = self.pending.popleft()
            if not future.done():
                future.set_exception(error)
        if self.transport is not None:
            self.transport.close()


class RespClient:
    def __init__(self, endpoint: RedisEndpoint | str, timeout_s: float) -> None:
        self._endpoint = parse_redis_url(endpoint) if isinstance(endpoint, str) else endpoint
        self._ssl = self._endpoint.tls.context() if self._endpoint.tls else None  # built once, not per connect
        self._timeout_s = timeout_s
        self._conn: _Connection | None = None
        self._connecting: asyncio.Future[_Connection] | None = None

    async def call(self, *args: object) -> Reply:
        return await self.send(encode_command(args))

    async def call_prepared(self, command: PreparedCommand, *args: object) -> Reply:
        return await self.send(command.encode(args))

    async def send(self, payload: bytes, asking: bool = False) -> Reply:
        """`asking`: ASKING first, on the same connection, as a cluster's ASK redirection wants (its reply, OK,
        is dropped)."""
        conn = self._conn if self._conn is not None and not self._conn.closed else await self._connect()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Reply] = loop.create_future()
        if asking:
            ack: asyncio.Future[Reply] = loop.create_future()
            ack.add_done_callback(_consumed)  # OK, or the connection's failure that `future` reports anyway
            conn.pending.append(ack)
            payload = _ASKING + payload
        conn.pending.append(future)
        assert conn.transport is not None  # set by connection_made before create_connection returns
        conn.transport.write(payload)
        deadline = loop.call_later(self._timeout_s, _expire, conn, future, self._timeout_s)
        try:
            reply = await future
        except StoreUnavailable as exc:  # sent, no reply: Redis may have run it
            raise StoreReplyLost(str(exc)) from exc
        finally:
            deadline.cancel()
        if isinstance(reply, RespError):
            raise reply
        return reply

    async def _connect(self) -> _Connection:
        if self._connecting is not None:  # one connect at a time; the others wait for it
            return await asyncio.shield(self._connecting)
        loop = asyncio.get_running_loop()
        self._connecting = loop.create_future()
        try:
            conn = await self._open(loop)
            self._conn = conn
            self._connecting.set_result(conn)
            return conn
        except BaseException as exc:
            error = exc if isinstance(exc, StoreUnavailable) else StoreUnavailable(f"redis: connect failed ({exc!r})")
            self._connecting.set_exception(error)
            self._connecting.exception()  # mark retrieved: waiters may be none
            raise error from None
        finally:
            self._connecting = None

    async def _open(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        endpoint = self._endpoint
        try:
            if endpoint.unix_path:
                connecting = loop.create_unix_connection(_Connection, endpoint.unix_path)
            elif self._ssl is not None:
                connecting = loop.create_connection(
                    _Connection, endpoint.host, endpoint.port, ssl=self._ssl, ssl_handshake_timeout=self._timeout_s
                )
            else:
                connecting = loop.create_connection(_Connection, endpoint.host, endpoint.port)
            _, conn = await asyncio.wait_for(connecting, self._timeout_s)
        except (TimeoutError, OSError) as exc:  # ssl.SSLError (a certificate refused) is an OSError
            raise StoreUnavailable(f"redis: cannot connect to {endpoint.address} ({exc!r})") from None
        setup: list[tuple[object, ...]] = []
        if endpoint.password:
            auth = ("AUTH", endpoint.username, endpoint.password) if endpoint.username else ("AUTH", endpoint.password)
            setup.append(auth)
        if endpoint.db:
            setup.append(("SELECT", endpoint.db))
        self._conn = conn
        for command in setup:
            future: asyncio.Future[Reply] = loop.create_future()
            conn.pending.append(future)
            assert conn.transport is not None  # set by connection_made before create_connection returns
            conn.transport.write(encode_command(command))
            try:
                reply = await asyncio.wait_for(future, self._timeout_s)
            except TimeoutError:
                conn.fail(StoreUnavailable("redis: setup timed out"))
                raise StoreUnavailable("redis: setup timed out") from None
            if isinstance(reply, RespError):
                conn.fail(StoreUnavailable(f"redis: {reply}"))
                raise StoreUnavailable(f"redis: {command[0]} failed: {reply}")
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.fail(StoreUnavailable("redis: client closed"))
            self._conn = None


def _expire(conn: _Connection, future: asyncio.Future[Reply], timeout_s: float) -> None:
    # Replies are matched by order, so a reply that never came poisons the connection: drop it.
    if not future.done():
        conn.fail(StoreUnavailable(f"redis: no reply within {timeout_s}s"))


def _consumed(future: asyncio.Future[Reply]) -> None:
    if not future.cancelled():
        future.exception()
