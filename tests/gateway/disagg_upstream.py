"""Fake replicas of a disaggregated model (docs/architecture.md, "Disaggregated prefill and decode") for gateway
tests: real Starlette apps (FakeUpstream's) served on loopback.

`PrefillUpstream` answers a prefill request (`kv_transfer_params.do_remote_decode`) as FakeUpstream would, plus a
fresh `kv_transfer_params` object per request (kept in `handed`, in order), and a usage of its own
(PREFILL_USAGE, so a test sees whether it was billed); its `mode` makes it fail. Every body it received is in
`received`. A decode replica is a plain FakeUpstream: the `kv_transfer_params` it got are in its `received`.
`HandoffRefusingUpstream` is a decode replica that refuses every handoff with a 400 naming the field, as an engine
does with parameters it cannot use. `ResettingPrefill` is a prefill replica whose kept-alive connections die.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket

from starlette.responses import JSONResponse, Response

from tests.gateway.dying_upstream import SocketUpstream, send_json
from tests.gateway.fake_upstream import FakeUpstream

PREFILL_CACHED_TOKENS = 16  # of the prompt, served from the prefill replica's own prefix cache
PREFILL_USAGE = {
    "prompt_tokens": 901,
    "completion_tokens": 1,
    "total_tokens": 902,
    "prompt_tokens_details": {"cached_tokens": PREFILL_CACHED_TOKENS},
}

HANDOFF = "handoff"
"""The contract's answer: kv_transfer_params with the blocks to pull."""
NO_BLOCKS = "no_blocks"
"""kv_transfer_params: null (a prompt without a full block)."""
MISSING = "missing"
"""An ordinary answer without kv_transfer_params: not a prefill replica."""
GARBAGE = "garbage"
"""200 with a body that is not JSON."""
FAILING = "failing"
"""500 with OpenAI's error object."""
SLOW = "slow"
"""Answers after `delay_s`, too late to be read: no kv_transfer_params."""


class PrefillUpstream(FakeUpstream):
    def __init__(self, mode: str = HANDOFF, delay_s: float = 0.0) -> None:
        super().__init__()
        self.mode = mode
        self.delay_s = delay_s
        self.handed: list[dict] = []
        self._ids = itertools.count(1)

    async def _respond(self, body: dict, chat: bool) -> Response:
        if (
            self.mode == SLOW
        ):  # an answer nobody waits for: it hands nothing over (a later test's `handed` stays its own)
            await asyncio.sleep(self.delay_s)
            return await super()._respond(body, chat)
        if self.mode == FAILING:
            error = {"error": {"message": "prefill broke", "type": "server_error", "param": None, "code": None}}
            return JSONResponse(error, status_code=500)
        if self.mode == GARBAGE:
            return Response(b'{"id": "cmpl-fake", "choices": [', media_type="application/json")
        out = json.loads((await super()._respond(body, chat)).body)
        out["usage"] = PREFILL_USAGE
        if self.mode != MISSING:
            out["kv_transfer_params"] = self._params() if self.mode != NO_BLOCKS else None
        return JSONResponse(out)

    def _params(self) -> dict:
        n = next(self._ids)
        params = {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_engine_id": f"prefill-engine-{id(self):x}",
            "remote_host": "10.0.0.5",
            "remote_port": 8100,
            "remote_block_ids": [n, n + 7, n + 3],
            "remote_request_id": f"prefill-req-{n}",
            "remote_num_tokens": 48,
            "remote_prefix_hash": f"{n * 0x9E3779B97F4A7C15 % 2**64:016x}",
        }
        self.handed.append(params)
        return params


class HandoffRefusingUpstream(FakeUpstream):
    async def _respond(self, body: dict, chat: bool) -> Response:
        if "kv_transfer_params" not in body:
            return await super()._respond(body, chat)
        param = "kv_transfer_params.remote_port"
        error = {"error": {"message": "no such port", "type": "invalid_request_error", "param": param, "code": None}}
        return JSONResponse(error, status_code=400)


class ResettingPrefill(SocketUpstream):
    """A prefill replica that restarted under the gateway's connection pool: each connection answers one prefill
    (a handoff, keep-alive) and is reset at the next request on it, as a restarted process's old sockets are; new
    connections are answered. Plain sockets in a thread (dying_upstream.py's), so the timing is the test's."""

    def __init__(self) -> None:
        super().__init__()
        self.handed: list[dict] = []
        self.resets = 0

    def _complete(self, conn: socket.socket, served_on_connection: int) -> bool:
        if served_on_connection:
            self.resets += 1
            return False
        params = {"do_remote_prefill": True, "remote_request_id": f"prefill-req-{len(self.handed)}"}
        self.handed.append(params)
        send_json(
            conn,
            json.dumps({"id": "c", "object": "chat.completion", "choices": [], "kv_transfer_params": params}).encode(),
        )
        return True
