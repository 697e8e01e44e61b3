"""The Reservation settles once, whatever ends the request: a cancellation, an error, or nothing admitted."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.admin.tenants import ApiKey, Tenant
from gateway.config import ModelConfig
from gateway.metrics import GatewayMetrics
from gateway.request.attempt import UpstreamAttempt
from gateway.request.context import RequestContext, RequestPhase
from gateway.request.parse import CHAT, ParsedRequest
from gateway.request.prompts import Prompt
from gateway.request.settlement import Reservation, SettlementParts
from gateway.store.base import OK, Admission, Settlement


class RecordingStore:
    def __init__(self) -> None:
        self.settled: list[Settlement] = []

    async def settle(self, settlement: Settlement, store: Any) -> None:
        self.settled.append(settlement)


def _parts() -> tuple[SettlementParts, RecordingStore, list[asyncio.Task[None]]]:
    store, tasks = RecordingStore(), []
    spawn = lambda coro: tasks.append(asyncio.get_running_loop().create_task(coro))  # noqa: E731
    return SettlementParts(store, GatewayMetrics(), {}, spawn), store, tasks


def _authed_context() -> RequestContext:
    ctx = RequestContext(CHAT, "req-1", b"req-1", 0.0, None)
    ctx.parsed = ParsedRequest(CHAT, {}, "tiny", True, False, 16, 1, [])
    ctx.model = ModelConfig(name="tiny", replicas=["http://127.0.0.1:1"])
    ctx.key, ctx.tenant = ApiKey("k1", "acme", "digest"), Tenant("acme")
    ctx.raw_body, ctx.lease_end_ms, ctx.reserved_out = b"{}", 0, 16
    ctx.prompt = Prompt(12, None, "hello", 12)
    ctx.phase = RequestPhase.AUTHED
    return ctx


def _admit(ctx: RequestContext) -> None:
    ctx.admission, ctx.phase = Admission(OK, reserved_out=16, day="d", month="m"), RequestPhase.ADMITTED


async def test_a_request_cancelled_after_admission_settles_once_with_nothing_used():
    parts, store, tasks = _parts()
    ctx = _authed_context()

    async def request() -> None:
        async with Reservation(parts, ctx, UpstreamAttempt(None, "/v1/chat/completions")):  # type: ignore[arg-type]
            _admit(ctx)
            await asyncio.sleep(10)  # waiting on the upstream when the server shuts down

    task = asyncio.get_running_loop().create_task(request())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.gather(*tasks)
    assert [(s.request_id, s.actual_in, s.actual_out, s.reserved_out) for s in store.settled] == [("req-1", 0, 0, 16)]
    assert ctx.phase is RequestPhase.SETTLED


async def test_a_stream_cut_without_usage_is_charged_by_its_delivered_text():
    parts, store, tasks = _parts()
    ctx = _authed_context()
    with pytest.raises(RuntimeError):
        async with Reservation(parts, ctx, UpstreamAttempt(None, "/v1/chat/completions")):  # type: ignore[arg-type]
            _admit(ctx)
            ctx.delivery.delivered_any, ctx.delivery.completion_text = True, "twelve bytes"
            raise RuntimeError("the upstream went away")
    await asyncio.gather(*tasks)
    assert [(s.actual_in, s.actual_out) for s in store.settled] == [(12, 3)]  # prompt count; ~4 bytes a token


async def test_nothing_admitted_nothing_settled():
    parts, store, tasks = _parts()
    ctx = _authed_context()
    async with Reservation(parts, ctx, UpstreamAttempt(None, "/v1/chat/completions")):  # type: ignore[arg-type]
        ctx.delivery.status = 429
    assert tasks == [] and store.settled == []
