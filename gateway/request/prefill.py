"""Hop 1 of a disaggregated request (docs/architecture.md, "Disaggregated prefill and decode"): the prompt is
prefilled on a prefill replica, whose answer carries the `kv_transfer_params` the decode hop hands to a decode replica.

The hop saves the decode replica work; it is never a failure the client sees. A prefill replica that fails before
answering (a refused or reset connection, a timeout, a 5xx) is the replica's fault, not the prompt's: the hop is tried
once more on another prefill replica of the model, when one can take it, since a handoff saves the decode pool a
whole prompt's compute. Whatever else goes wrong (no prefill replica can take it, the second try fails too, a 4xx,
an answer without kv_transfer_params) the decode hop goes on without a handoff and the decode replica prefills the
prompt itself. Each try's route is released as soon as its answer (or its failure) is in, so the prefill replica's
load estimate and circuit breaker count it like any request; none of its usage is the client's (settlement reads the
decode hop's alone).
"""

from __future__ import annotations

import enum
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from gateway.metrics import GatewayMetrics
from gateway.request.body import KV_TRANSFER_PARAMS
from gateway.request.context import Outcome
from gateway.request.upstream import UpstreamPool, stale_connection
from gateway.request.usage import cached_tokens
from gateway.routing.base import NoHealthyReplicaError, Route, Router, RouteRequest


class HopOutcome(enum.StrEnum):
    """The `outcome` label of sluicegate_prefill_hops."""

    OK = "ok"
    """The prefill replica answered: its handoff (reason `handoff`), or none to make (`no_handoff`: the prompt has
    no full block)."""
    FALLBACK = "fallback"
    """The hop failed (reason: `no_replica`, `connect`, `timeout`, `http_<status>`, `malformed`; after a retry, the
    second try's): the decode replica prefills the prompt itself."""
    RETRIED = "retried"
    """The hop's first prefill replica failed before answering (reason: `connect`, `timeout`, `http_5xx`) and it was
    sent to another: the same hop counts again under its final outcome, so this series adds no hops."""
    SKIPPED = "skipped"
    """Not tried: several completions (reason `n`), which one handoff cannot serve, are served whole; a prompt under
    the model's `prefill_min_prompt_tokens` (reason `short`) is computed by the decode replica."""


@dataclass(frozen=True, slots=True)
class Handoff:
    replica: str
    """The prefill replica that answered."""
    kv_transfer_params: dict[str, Any] | None
    """Its answer's kv_transfer_params, for the decode hop unchanged; None: nothing to hand over."""
    cached_tokens: int = 0
    """The prompt tokens it served from its own prefix cache (its usage's prompt_tokens_details.cached_tokens): what
    was not computed anywhere, so what the request is billed as cached (settlement.py, billed_cached_tokens)."""


class _HopFailed(Exception):
    def __init__(self, reason: str, outcome: Outcome, retry: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.outcome = outcome
        """What the router is told: the replica's fault, or OK for a request it refused as the client's (4xx)."""
        self.retry = retry
        """It failed before answering: another prefill replica may well succeed. Not after an answer: a 4xx refuses
        the request itself, and an answer without a handoff is the deployment's (a replica not started as prefill),
        which every try would meet."""


class PrefillHop:
    """Built once (runtime.py); `run` per disaggregated request."""

    def __init__(self, router: Router, pool: UpstreamPool, metrics: GatewayMetrics) -> None:
        self._router = router
        self._pool = pool
        self._metrics = metrics

    def skipped(self, model: str, reason: str) -> None:
        self._metrics.child(self._metrics.prefill_hops, model, HopOutcome.SKIPPED, reason).inc()

    async def run(self, path: str, request: RouteRequest, body: bytes, headers: dict[str, str]) -> Handoff | None:
        """Route (`request.stage` is PREFILL), send `body` (body.prefill_body), read the handoff, retried once on
        another prefill replica after a failure before any answer; None when the hop failed. Only a cancellation
        (the client left, the admission refused) raises."""
        model = request.model
        try:
            route = self._router.route(request)
        except NoHealthyReplicaError:
            self._metrics.child(self._metrics.prefill_hops, model, HopOutcome.FALLBACK, "no_replica").inc()
            return None
        started_s = time.perf_counter()  # the hop's time is both tries': what it adds before the decode hop
        answer = await self._try(route, path, body, headers)
        if isinstance(answer, _HopFailed) and answer.retry:
            try:
                second = self._router.route(request, frozenset({route.replica}))
            except NoHealthyReplicaError:  # no other prefill replica can take it: the first failure stands
                pass
            else:
                self._metrics.child(self._metrics.prefill_hops, model, HopOutcome.RETRIED, answer.reason).inc()
                answer = await self._try(second, path, body, headers)
        if isinstance(answer, _HopFailed):
            self._count(model, started_s, HopOutcome.FALLBACK, answer.reason)
            return None
        self._count(
            model, started_s, HopOutcome.OK, "handoff" if answer.kv_transfer_params is not None else "no_handoff"
        )
        return answer

    async def _try(self, route: Route, path: str, body: bytes, headers: dict[str, str]) -> Handoff | _HopFailed:
        """One prefill replica's try, its route released whatever happens."""
        outcome = Outcome.CLIENT_DISCONNECT  # kept only when cancelled: the request went away, the replica did no wrong
        try:
            params, cached_tokens = await self._send(route, path, body, headers)
            outcome = Outcome.OK
        except _HopFailed as failed:
            outcome = failed.outcome
            return failed
        finally:
            self._router.release(route, outcome)
        return Handoff(route.replica, params, cached_tokens)

    async def _send(
        self, route: Route, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[dict[str, Any] | None, int]:
        session = self._pool.session(route.url)
        try:
            try:
                response = await session.post(path, data=body, headers=headers, timeout=self._pool.prefill_timeout)
            except aiohttp.ClientError as exc:
                if not stale_connection(exc):
                    raise
                response = await session.post(path, data=body, headers=headers, timeout=self._pool.prefill_timeout)
        except TimeoutError:
            raise _HopFailed("timeout", Outcome.ERROR_BEFORE_FIRST_BYTE, retry=True) from None
        except aiohttp.ClientError:
            raise _HopFailed("connect", Outcome.ERROR_BEFORE_FIRST_BYTE, retry=True) from None
        try:
            if response.status >= 300:
                # a 4xx refuses the request itself (the decode hop gets the same answer, which the client then sees)
                failed = response.status >= 500
                blame = Outcome.ERROR_BEFORE_FIRST_BYTE if failed else Outcome.OK
                raise _HopFailed(f"http_{response.status}", blame, retry=failed)
            data = await response.read()
        except TimeoutError:
            raise _HopFailed("timeout", Outcome.ERROR_BEFORE_FIRST_BYTE, retry=True) from None
        except aiohttp.ClientError:
            raise _HopFailed("connect", Outcome.ERROR_BEFORE_FIRST_BYTE, retry=True) from None
        finally:
            response.close()  # read to the end, the connection is back in the pool already; else it is cut
        try:
            answer = json.loads(data)
        except (ValueError, RecursionError):
            raise _HopFailed("malformed", Outcome.ERROR_BEFORE_FIRST_BYTE) from None
        params = answer.get(KV_TRANSFER_PARAMS, False) if isinstance(answer, dict) else False
        if params is None or isinstance(params, dict):
            return params, cached_tokens(answer.get("usage"))
        raise _HopFailed("malformed", Outcome.ERROR_BEFORE_FIRST_BYTE)  # not a prefill replica's answer

    def _count(self, model: str, started_s: float, outcome: HopOutcome, reason: str) -> None:
        metrics = self._metrics
        metrics.child(metrics.prefill_seconds, model).observe(time.perf_counter() - started_s)
        metrics.child(metrics.prefill_hops, model, outcome, reason).inc()
