"""The hot path's client behind Redis Sentinel: the sentinels name the master, one pipelined RespClient speaks to it.

Why re-discovery on failure only: asking a sentinel before every call would double the hot path's round trips.
The master's address is asked for once (`SENTINEL get-master-addr-by-name`, each sentinel in turn until one
answers) and kept until the master fails a call in a way a failover explains: the connection is lost or refused, a
call times out, or it answers READONLY (it was demoted to a replica). That call fails as an outage (resilient.py
decides what it means, so a settlement is queued and replayed) and the next call asks the sentinels again.

Sentinels are asked without credentials (the URL's user and password are the master's) over the same transport.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Final

from gateway.store.base import StoreUnavailable
from gateway.store.redis_url import RedisEndpoint
from gateway.store.resp import PreparedCommand, Reply, RespClient, RespError, encode_command

_DEMOTED: Final = frozenset({"READONLY", "MASTERDOWN"})


class SentinelClient:
    def __init__(self, endpoint: RedisEndpoint, timeout_s: float) -> None:
        assert endpoint.master_name is not None  # the URL parser requires it
        self._endpoint = endpoint
        self._name = endpoint.master_name
        self._timeout_s = timeout_s
        self._sentinels = [
            RespClient(dataclasses.replace(endpoint.at(*address), username=None, password=None, db=0), timeout_s)
            for address in endpoint.seeds
        ]
        self._master: RespClient | None = None
        self._discovering: asyncio.Future[RespClient] | None = None
        self.discoveries = 0
        """Masters asked for so far (tests and logs: a failover was followed)."""

    async def call(self, *args: object) -> Reply:
        return await self._send(encode_command(args))

    async def call_prepared(self, command: PreparedCommand, *args: object) -> Reply:
        return await self._send(command.encode(args))

    def close(self) -> None:
        for client in (*self._sentinels, *([self._master] if self._master else [])):
            client.close()
        self._master = None

    async def _send(self, payload: bytes) -> Reply:
        master = self._master if self._master is not None else await self._discover()
        try:
            return await master.send(payload)
        except RespError as exc:
            if exc.code in _DEMOTED:
                self._forget(master)
            raise
        except StoreUnavailable:
            self._forget(master)
            raise

    def _forget(self, master: RespClient) -> None:
        if self._master is master:
            self._master = None
            master.close()

    async def _discover(self) -> RespClient:
        """One round of questions at a time; the callers that arrive meanwhile wait for its answer."""
        if self._discovering is not None:
            return await asyncio.shield(self._discovering)
        self._discovering = asyncio.get_running_loop().create_future()
        try:
            master = await self._ask_sentinels()
            self._master = master
            self._discovering.set_result(master)
            return master
        except BaseException as exc:
            self._discovering.set_exception(exc)
            self._discovering.exception()  # mark retrieved: waiters may be none
            raise
        finally:
            self._discovering = None

    async def _ask_sentinels(self) -> RespClient:
        errors = []
        for sentinel in self._sentinels:
            try:
                reply = await sentinel.call("SENTINEL", "get-master-addr-by-name", self._name)
            except (StoreUnavailable, RespError) as exc:
                errors.append(str(exc))
                continue
            if reply:
                self.discoveries += 1
                host, port = reply
                return RespClient(self._endpoint.at(host, int(port)), self._timeout_s)
            errors.append(f"no master named {self._name!r}")
        raise StoreUnavailable(f"redis sentinel: no sentinel named the master ({'; '.join(errors)})")
