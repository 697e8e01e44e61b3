"""The hot-path Redis client: the pure-Python reply parser (used when hiredis is absent) and pipelining."""

from __future__ import annotations

import asyncio

import pytest

from gateway.store import resp
from gateway.store.base import StoreUnavailable
from tests.gateway.conftest import REDIS_URL


def test_python_reader_parses_replies_split_anywhere():
    wire = b"+OK\r\n:42\r\n$4\r\nh\xc3\xa9l\r\n$-1\r\n*3\r\n$1\r\na\r\n:7\r\n*1\r\n$0\r\n\r\n-NOSCRIPT No matching\r\n"
    for cut in range(len(wire)):
        reader = resp._PyReader()
        replies = []
        for part in (wire[:cut], wire[cut:]):
            reader.feed(part)
            while (reply := reader.gets()) is not False:
                replies.append(reply)
        assert replies[:5] == ["OK", 42, "hél", None, ["a", 7, [""]]]
        assert isinstance(replies[5], resp.RespError) and str(replies[5]).startswith("NOSCRIPT")


@pytest.mark.asyncio(loop_scope="session")
async def test_pipelined_calls_on_one_connection(monkeypatch):
    monkeypatch.setattr(resp, "hiredis", None)  # the parser a fresh install without hiredis uses
    client = resp.RespClient(REDIS_URL, timeout_s=5.0)
    try:
        replies = await asyncio.gather(*(client.call("ECHO", f"m{i}") for i in range(200)))
        assert replies == [f"m{i}" for i in range(200)]
        with pytest.raises(resp.RespError):
            await client.call("NOSUCHCOMMAND")
        assert await client.call("PING") == "PONG"  # an error reply leaves the connection usable
    finally:
        client.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_unreachable_redis_fails_fast():
    client = resp.RespClient("redis://127.0.0.1:1/0", timeout_s=0.5)
    with pytest.raises(StoreUnavailable):
        await client.call("PING")
