"""Step 6 of the request path: one request's way to a replica. Routes, sends, fails over to every other healthy
replica in turn before the first byte (a request is refused only when none can take it), and at the end releases
what it holds: the connection (back to the pool, or closed, which cancels the upstream's work) and the route (the
router's load and health bookkeeping).

An attempt may be opened in the background while admission runs (overlap.py) or while input checks run alongside it
(admission.py, `cleared`): `start` begins it, `opened` waits for it, and `abandon` cancels it when the admission or a
check refuses; nothing of its response reaches the client before then.

A request of a disaggregated model (docs/architecture.md, "Disaggregated prefill and decode") first takes its prefill
hop (prefill.py) and then routes as its decode hop, with the prefill's handoff for a decode replica; everything after
the decode replica's answer (failover before it, streaming, release) is any request's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from gateway.errors import ApiError, unavailable, upstream_failed, upstream_retry_after_s, upstream_timeout
from gateway.metrics import GatewayMetrics
from gateway.request.body import (
    KV_TRANSFER_PARAMS,
    cache_salt,
    handed_over_tokens,
    prefill_body,
    upstream_body,
    upstream_changes,
    with_handoff,
)
from gateway.request.context import Outcome, RequestContext, RequestPhase
from gateway.request.parse import EMBEDDINGS
from gateway.request.prefill import PrefillHop
from gateway.request.prompts import max_context
from gateway.request.spans import stage, upstream_trace_headers
from gateway.request.tokenizer import PromptTokenizer
from gateway.request.upstream import UpstreamPool, stale_connection
from gateway.routing.base import NoHealthyReplicaError, Role, Route, Router, RouteRequest, Stage
from sluicegate.block_hash import block_hashes

CLIENT_FAULT_STATUSES = frozenset({400, 413, 422})
"""An upstream answering these refused the request itself (a parameter it does not take, a prompt too long): the
client's error, passed on, not counted in sluicegate_upstream_errors. Other 4xx (401/403: the gateway's upstream
credentials, 404: a model the upstream lacks, 429) are the deployment's, and count."""


@dataclass(frozen=True, slots=True)
class UpstreamLinks:
    """What every attempt shares: built once, at start-up."""

    router: Router
    pool: UpstreamPool
    metrics: GatewayMetrics
    tokenizers: dict[str, PromptTokenizer]
    """Model name -> its tokenizer (filled at start-up): the context length caps `max_tokens`."""
    prefill: PrefillHop
    """Disaggregated models' first hop."""


class UpstreamAttempt:
    def __init__(self, links: UpstreamLinks, path: str) -> None:
        self._links = links
        self._path = path
        self._opening: asyncio.Task[None] | None = None
        """The background open of an overlapped request; None when it opens in line."""
        self.route: Route | None = None
        """Held from routing until `release`."""
        self.replica: str | None = None
        """The replica last sent to, kept after `release` (the access log names it)."""
        self.prefill_replica: str | None = None
        """The prefill replica whose handoff the answering replica got (debug headers); None when it got none."""
        self._prefill_cached_tokens = 0
        """What the prefill replica served from its own prefix cache (Handoff.cached_tokens)."""
        self.first_token_s = 0.0
        """perf_counter() when the replica's first token arrived; 0.0 until then."""
        self.response: aiohttp.ClientResponse | None = None
        """The replica's 2xx response, held until `release`."""
        self.outcome = Outcome.ERROR_BEFORE_FIRST_BYTE
        """What the router is told on release."""
        self.accepted = False
        """The replica answered 2xx: it took the request and started on it (its prompt counts as used)."""
        self.cut = False
        """The gateway ended a healthy stream itself (an output block): the upstream's work is cancelled."""

    def start(self, ctx: RequestContext) -> None:
        """Open in the background, before the admission or the input checks have answered."""
        self._opening = asyncio.get_running_loop().create_task(self._open(ctx))

    @property
    def started(self) -> bool:
        return self._opening is not None

    async def opened(self, ctx: RequestContext) -> None:
        """The request is sent and the replica answered 2xx (ApiError otherwise)."""
        await (self._opening if self._opening is not None else self._open(ctx))
        ctx.phase = RequestPhase.ROUTED

    async def abandon(self) -> None:
        """The admission (or an input check that ran alongside) refused an overlapped request: cancel it, the replica
        not blamed, the tenant not charged."""
        # first: however the wait below ends, the replica is not blamed and the tenant not charged for the prompt
        self.outcome, self.accepted = Outcome.NOT_ADMITTED, False
        await self.stop_opening()

    async def restart(self) -> None:
        """What was sent is stale (an admin changed the tenant meanwhile): drop it, so `opened` sends afresh."""
        await self.abandon()
        self.release()
        self._opening = None
        self.outcome, self.accepted = Outcome.ERROR_BEFORE_FIRST_BYTE, False

    async def stop_opening(self) -> None:
        """Cancel a background open still running and wait for it to unwind (route chosen, connection closed), so
        that whoever reads the attempt next sees its final state; its failure is not what the client hears."""
        opening = self._opening
        if opening is None:
            return
        try:
            if not opening.done():
                opening.cancel()
                await asyncio.wait([opening])
        finally:
            if opening.done() and not opening.cancelled():
                opening.exception()  # read: a failure nobody will hear of is not "never retrieved"

    def first_token(self) -> None:
        """The replica's first byte arrived: the router's queued-prefill estimate for it drops this prompt."""
        self.first_token_s = time.perf_counter()
        if self.route is not None:
            self._links.router.first_token(self.route)

    def release(self) -> None:
        """The attempt is over: its connection goes back to the pool or is closed, its route is released."""
        if self.response is not None:
            if self.outcome == Outcome.OK and not self.cut:
                self.response.release()  # read to the end: the connection goes back to the pool
            else:
                self.response.close()  # cut or refused: closing the connection cancels the upstream's work
            self.response = None
        if self.route is not None:
            self._links.router.release(self.route, self.outcome)
            self.route = None

    async def _open(self, ctx: RequestContext) -> None:
        """Route and send; on a failure before the first byte, try the next healthy replica the router offers, until
        one answers or none is left (the router raises NoHealthyReplicaError once every replica is excluded)."""
        links = self._links
        salt = cache_salt(ctx)
        ids = ctx.prompt.token_ids
        request = RouteRequest(
            ctx.parsed.model,
            ids,
            ctx.prompt.text,
            ctx.reserved_out,
            salt,
            block_hashes(ids, ctx.model.block_size, salt) if ids else [],
        )
        changes = upstream_changes(ctx, salt, max_context(ctx.model, links.tokenizers.get(ctx.model.name)))
        body = upstream_body(ctx, changes)
        headers = {"content-type": "application/json", "x-request-id": ctx.request_id}
        upstream_trace_headers(headers, ctx.traceparent)
        handoff_body: bytes | None = None  # with the prefill's handoff: for decode replicas (others prefill themselves)
        if ctx.kind != EMBEDDINGS and links.router.disaggregated(request.model):
            handoff_body = await self._prefill(ctx, request, changes, body, headers)
        exclude: frozenset[str] = frozenset()
        last_error: ApiError | None = None
        # A kept-alive connection the replica had closed (it restarted, or died) earns one fresh connection to the
        # same replica before it is excluded.
        reconnected: set[str] = set()
        while True:
            try:
                with stage("route"):
                    route = links.router.route(request, exclude)
            except NoHealthyReplicaError as exc:
                raise last_error or unavailable(str(exc), exc.retry_after_s) from None
            self.route, self.replica = route, route.replica
            session = links.pool.session(route.url)
            handing_off = handoff_body is not None and route.role == Role.DECODE
            try:
                response = await session.post(self._path, data=handoff_body if handing_off else body, headers=headers)
            except TimeoutError:  # aiohttp's ServerTimeoutError is one too: no answer within read_timeout_s
                links.metrics.child(links.metrics.upstream_errors, "timeout").inc()
                raise upstream_timeout(f"The upstream {route.replica} did not answer in time.") from None
            except aiohttp.ClientError as exc:
                links.metrics.child(links.metrics.upstream_errors, "connect").inc()
                last_error = upstream_failed(f"Could not reach the upstream {route.replica}: {type(exc).__name__}.")
                self._drop_route(route)
                if stale_connection(exc) and route.replica not in reconnected:
                    reconnected.add(route.replica)
                    continue
            else:
                if response.status < 400:
                    self.response, self.accepted = response, True
                    if handing_off:  # what it reports cached includes the handoff: settlement bills the prefill's
                        ctx.delivery.handed_over_tokens = request.handed_over_tokens
                        ctx.delivery.prefill_cached_tokens = self._prefill_cached_tokens
                    else:
                        self.prefill_replica = None
                    return
                last_error = await _upstream_error(response)
                if handing_off and (last_error.param or "").startswith(KV_TRANSFER_PARAMS):
                    # The decode replica refused the handoff itself: it gets the request without one and prefills
                    # it (the client never sees a prefill failure).
                    links.metrics.child(links.metrics.upstream_errors, "handoff_refused").inc()
                    links.router.release(route, Outcome.OK)
                    self.route, handoff_body = None, None
                    request.handed_over_tokens = 0
                    continue
                if response.status not in CLIENT_FAULT_STATUSES:
                    links.metrics.child(links.metrics.upstream_errors, f"http_{response.status}").inc()
                if response.status < 500:
                    self.outcome = Outcome.OK  # the replica is healthy; the request was bad
                    raise last_error
                self._drop_route(route)
            exclude = exclude | {route.replica}

    async def _prefill(
        self, ctx: RequestContext, request: RouteRequest, changes: dict[str, Any], body: bytes, headers: dict[str, str]
    ) -> bytes | None:
        """The prefill hop, then `request` routes as the decode hop; the decode hop's body with the handoff, None
        when there is none to send (several completions, the hop failed, or a prompt without a full block)."""
        prefill = self._links.prefill
        if ctx.parsed.completions > 1:  # one handoff serves one sequence: the request is served whole
            prefill.skipped(request.model, "n")
            return None
        ids = request.prompt_token_ids
        if ids is not None and len(ids) < ctx.model.prefill_min_prompt_tokens:
            # Selective disaggregation: a short prompt costs the decode batch less than a handoff costs the request
            # (a second round trip, a queue on the prefill replica behind long prompts).
            prefill.skipped(request.model, "short")
            request.stage = Stage.DECODE
            return None
        hop = dataclasses.replace(request, max_tokens=1, stage=Stage.PREFILL)
        handoff = await prefill.run(self._path, hop, prefill_body(ctx, changes), headers)
        request.stage = Stage.DECODE
        if handoff is None:
            return None
        self.prefill_replica = handoff.replica
        if handoff.kv_transfer_params is None:
            return None
        request.handed_over_tokens = handed_over_tokens(handoff.kv_transfer_params)
        self._prefill_cached_tokens = handoff.cached_tokens
        return with_handoff(body, handoff.kv_transfer_params)

    def _drop_route(self, route: Route) -> None:
        """This replica failed before the first byte: released as such, the next try routes afresh."""
        self._links.router.release(route, Outcome.ERROR_BEFORE_FIRST_BYTE)
        self.route = None


async def _upstream_error(response: aiohttp.ClientResponse) -> ApiError:
    """An upstream's error answer in OpenAI's format: its own message kept, 5xx mapped to 502/503."""
    try:
        data = await response.read()
    except (TimeoutError, aiohttp.ClientError):
        data = b""
    finally:
        response.release()
    message, code, param = f"The upstream answered HTTP {response.status}.", None, None
    try:
        error = json.loads(data).get("error")
        if isinstance(error, dict):
            message, code, param = str(error.get("message") or message), error.get("code"), error.get("param")
    except (ValueError, AttributeError):
        pass
    status = response.status
    if status == 503:
        return unavailable(
            f"The upstream is overloaded: {message}", upstream_retry_after_s(response.headers.get("retry-after"))
        )
    if status >= 500:
        return upstream_failed(f"The upstream failed: {message}")
    return ApiError(
        status,
        message,
        "invalid_request_error",
        code if isinstance(code, str) else None,
        param if isinstance(param, str) else None,  # the replica named the field at fault: the client sees it too
    )
