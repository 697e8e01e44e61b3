"""The OpenAI endpoints (/v1/chat/completions, /v1/completions) as plain ASGI: admission (admission.py), then
steps 6-8 of the request path: route, forward, stream back, settle.

Exactly-once settlement: whatever ends a request (success, upstream error, timeout, client disconnect, server
shutdown), the `finally` of `__call__` hands it to `_finish`, which runs no await itself (so a cancellation
cannot interrupt it) and settles in a background task. What is charged:

    error before the first byte     nothing (0 in, 0 out)
    completed                       the upstream's usage; without usage: our prompt count + the delivered text
    cut mid-stream / disconnected   the upstream's usage if it came, else our prompt count + the delivered text
    blocked by an output guardrail  our prompt count + the text generated up to the block (the upstream is cut)
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from dataclasses import dataclass

import aiohttp

from gateway.admission import Ticket, decide, prepare, tokenize
from gateway.asgi import JSON, ClientGone, header, send_bytes, send_error
from gateway.errors import ApiError, unavailable, upstream_failed, upstream_retry_after_s, upstream_timeout
from gateway.parse import CHAT
from gateway.prompts import max_context
from gateway.routing.base import (
    CLIENT_DISCONNECT,
    ERROR_BEFORE_FIRST_BYTE,
    ERROR_MID_STREAM,
    NOT_ADMITTED,
    OK,
    NoHealthyReplicaError,
    Route,
    RouteRequest,
)
from gateway.spans import stage, upstream_trace_headers
from gateway.sse import StreamScanner, choice_texts, error_event
from gateway.store.base import Settlement
from gateway.tokenizer import estimate_tokens
from sluicegate.block_hash import block_hashes

log = logging.getLogger(__name__)
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


@dataclass
class Flight:
    """What happened upstream and downstream so far: read by `_finish` however the request ended."""

    route: Route | None = None
    response: aiohttp.ClientResponse | None = None
    outcome: str = ERROR_BEFORE_FIRST_BYTE
    delivered_any: bool = False
    scanner: StreamScanner | None = None
    usage: dict | None = None
    completion_text: str | None = None
    status: int = 0
    client_gone: bool = False
    cut: bool = False
    """The gateway ended a healthy stream itself (an output block): the upstream's work is cancelled."""
    accepted: bool = False
    """The replica answered 2xx: it took the request and started on it."""


class CompletionsEndpoint:
    def __init__(self, gw, kind: str):
        self._gw = gw
        self._kind = kind
        self._path = "/v1/chat/completions" if kind == CHAT else "/v1/completions"

    async def __call__(self, scope, receive, send) -> None:
        started = time.perf_counter()
        gw = self._gw
        if scope["method"] != "POST":
            await send_error(send, ApiError(405, f"Use POST for {self._path}.", code="method_not_allowed"))
            return
        ticket: Ticket | None = None
        flight = Flight()
        request_id = gw.next_request_id()
        shown_id = _client_request_id(scope) or request_id.encode()
        try:
            try:
                ticket = await prepare(gw, self._kind, scope, receive, request_id, shown_id)
                opening = await self._admit(ticket, flight, scope)
            except ApiError as error:
                # Once the key is known (a refusal, a prompt too long), the answer counts under its tenant.
                tenant, model = (ticket.tenant.id, ticket.parsed.model) if ticket is not None else ("", "")
                gw.count_request(tenant, model, error.status)
                await send_error(send, error, [(b"x-request-id", shown_id)])
                return
            except ClientGone:
                return
            await self._forward(ticket, flight, scope, receive, send, started, opening)
        finally:
            if ticket is not None:
                self._finish(ticket, flight)

    async def _admit(self, a: Ticket, flight: Flight, scope) -> asyncio.Task | None:
        """Steps 4-5. When the key has ample headroom (gateway/overlap.py) the upstream request starts in a task while
        the admission script runs, and nothing of its response is sent until the script admits; a refusal cancels
        the task, which closes its connection and so aborts the request upstream. Returns the task, or None when
        the request was admitted first."""
        gw = self._gw
        await tokenize(gw, a)
        a.overlap_needs = gw.overlap.allows(a.tenant.id, a.key.digest, a.prompt.prompt_tokens, a.reserved_out)
        if a.overlap_needs is None:
            await decide(gw, a)
            return None
        tenant = a.tenant
        opening = asyncio.get_running_loop().create_task(self._open(a, flight, scope))
        try:
            await decide(gw, a)
        except BaseException as exc:
            await _abandon(opening, flight)
            if isinstance(exc, ApiError):
                gw.metrics.overlap_refusals.inc()
            raise
        if a.tenant is not tenant:
            # An admin changed the tenant: what was sent used the old copy (its cache salt, its prefix hashes).
            await _abandon(opening, flight)
            self._let_go(flight)
            flight.outcome, flight.accepted = ERROR_BEFORE_FIRST_BYTE, False  # a fresh attempt follows
            return None
        gw.metrics.overlapped.inc()
        return opening

    # ---- forward ------------------------------------------------------------------------------------------------
    async def _forward(self, a: Ticket, flight: Flight, scope, receive, send, started: float,
                       opening: asyncio.Task | None) -> None:
        task = asyncio.current_task()

        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            flight.client_gone = True
            task.cancel()

        watcher = asyncio.get_running_loop().create_task(watch_disconnect())
        try:
            with stage("upstream"):
                await (opening if opening is not None else self._open(a, flight, scope))
            if self._gw.config.debug_headers and flight.route is not None:
                a.headers += [(b"x-sluicegate-replica", flight.route.replica.encode()),
                              (b"x-sluicegate-prefix-tokens", str(flight.route.matched_prefix_tokens).encode())]
            with stage("stream"):
                if a.parsed.stream:
                    await self._relay_stream(a, flight, send, started)
                else:
                    await self._relay_json(a, flight, send, started)
        except ApiError as error:
            flight.status = error.status
            await send_error(send, error, a.headers)
        except asyncio.CancelledError:
            if not flight.client_gone:
                raise
            flight.outcome, flight.status = CLIENT_DISCONNECT, 499
        except OSError:  # servers other than uvicorn raise on a send to a client that has gone
            flight.outcome, flight.status = CLIENT_DISCONNECT, 499
        finally:
            watcher.cancel()
            if opening is not None and not opening.done():  # the client left while it was still opening
                await _cancel(opening)

    async def _open(self, a: Ticket, flight: Flight, scope) -> None:
        """Route and send; on a failure before the first byte, retry once on another replica (router contract)."""
        gw = self._gw
        salt = _cache_salt(a)
        ids = a.prompt.token_ids
        request = RouteRequest(a.parsed.model, ids, a.prompt.text, a.reserved_out, salt,
                               block_hashes(ids, a.model.block_size, salt) if ids else [])
        body = _upstream_body(a, salt, max_context(a.model, gw.tokenizers.get(a.model.name)))
        headers = {"content-type": "application/json", "x-request-id": a.request_id}
        upstream_trace_headers(headers, header(scope, b"traceparent"))
        exclude: frozenset[str] = frozenset()
        last_error: ApiError | None = None
        # A kept-alive connection the replica had closed (it restarted, or died) earns one fresh connection to the
        # same replica before the one retry on another; it does not use that retry up.
        reconnected: set[str] = set()
        while True:
            try:
                with stage("route"):
                    route = gw.router.route(request, exclude)
            except NoHealthyReplicaError as exc:
                raise last_error or unavailable(str(exc), exc.retry_after_s) from None
            flight.route = route
            session = gw.upstreams.session(route.url)
            try:
                response = await session.post(self._path, data=body, headers=headers)
            except asyncio.TimeoutError:  # aiohttp's ServerTimeoutError is one too: no answer within read_timeout_s
                gw.metrics.child(gw.metrics.upstream_errors, "timeout").inc()
                raise upstream_timeout(f"The upstream {route.replica} did not answer in time.") from None
            except aiohttp.ClientError as exc:
                gw.metrics.child(gw.metrics.upstream_errors, "connect").inc()
                last_error = upstream_failed(f"Could not reach the upstream {route.replica}: {type(exc).__name__}.")
                gw.router.release(route, ERROR_BEFORE_FIRST_BYTE)
                flight.route = None
                stale = isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)) and not isinstance(
                    exc, aiohttp.ClientConnectorError)  # a refused connect is no stale connection
                if stale and route.replica not in reconnected:
                    reconnected.add(route.replica)
                    continue
            else:
                if response.status < 400:
                    flight.response, flight.accepted = response, True
                    return
                last_error = await _upstream_error(response)
                gw.metrics.child(gw.metrics.upstream_errors, f"http_{response.status}").inc()
                if response.status < 500:
                    flight.outcome = OK  # the replica is healthy; the request was bad
                    raise last_error
                gw.router.release(route, ERROR_BEFORE_FIRST_BYTE)
                flight.route = None
            if exclude:  # the retry on another replica failed too
                raise last_error
            exclude = exclude | {route.replica}

    async def _relay_json(self, a: Ticket, flight: Flight, send, started: float) -> None:
        response = flight.response
        try:
            data = await response.read()
        except asyncio.TimeoutError:
            raise upstream_timeout("The upstream stopped answering.") from None
        except aiohttp.ClientError as exc:
            raise upstream_failed(f"The upstream failed while answering: {type(exc).__name__}.") from None
        try:
            obj = json.loads(data)
        except ValueError:
            raise upstream_failed("The upstream answered with invalid JSON.") from None
        usage = obj.get("usage") if isinstance(obj, dict) else None
        flight.usage = usage if isinstance(usage, dict) else None
        if _int((flight.usage or {}).get("completion_tokens"), None) is None:  # no usable count: settle by the text
            flight.completion_text = "".join(choice_texts(obj, streaming=False))
        # The replica answered: it is healthy and the tenant used its tokens, even if the output check blocks.
        flight.outcome, flight.status = OK, response.status
        flight.delivered_any = True
        data = await self._gw.hooks.check_output(a.tenant, self._kind, data)
        await send_bytes(send, response.status, data, [JSON, *a.headers])
        self._gw.metrics.child(self._gw.metrics.ttft, a.parsed.model).observe(time.perf_counter() - started)

    async def _relay_stream(self, a: Ticket, flight: Flight, send, started: float) -> None:
        gw = self._gw
        scanner = flight.scanner = StreamScanner(strip_usage=not a.parsed.client_wants_usage)
        transformer = gw.hooks.output_transformer(a.tenant, self._kind, a.parsed.body)
        flight.status = 200
        await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *a.headers]})
        inter_chunk = gw.metrics.child(gw.metrics.inter_chunk, a.parsed.model)
        last_sent = 0.0
        tail = b""
        try:
            async for chunk in flight.response.content.iter_any():
                data = scanner.feed(chunk)
                if transformer is not None:
                    data = transformer.feed(data)
                    flight.cut = transformer.blocked
                if data:
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                    now = time.perf_counter()
                    if last_sent:
                        inter_chunk.observe(now - last_sent)
                    else:
                        gw.metrics.child(gw.metrics.ttft, a.parsed.model).observe(now - started)
                        flight.delivered_any = True
                    last_sent = now
                if flight.cut:  # blocked: stop reading, so the upstream stops generating what nobody will see
                    break
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            gw.metrics.child(gw.metrics.upstream_errors, "mid_stream").inc()
            tail = error_event(f"The upstream failed mid-stream: {type(exc).__name__}.", "upstream_error")
        else:
            if not scanner.saw_done and not flight.cut:
                gw.metrics.child(gw.metrics.upstream_errors, "mid_stream").inc()
                tail = error_event("The upstream ended the stream early.", "upstream_error")
        flight.usage = scanner.usage
        flight.outcome = ERROR_MID_STREAM if tail else OK
        if transformer is not None:
            tail = transformer.flush() + tail
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    # ---- settle -------------------------------------------------------------------------------------------------
    def _finish(self, a: Ticket, flight: Flight) -> None:
        """Runs in `finally`: no await here, so neither a cancellation nor an error can skip the settlement."""
        if a.settled:
            return
        a.settled = True
        gw = self._gw
        if a.admission is not None:
            gw.spawn(self._settle(a, flight))  # first: nothing below may keep the reservation from being settled
        self._let_go(flight)
        if a.admission is not None:  # a refusal was counted when it was answered
            gw.count_request(a.tenant.id, a.parsed.model, flight.status or 500)

    def _let_go(self, flight: Flight) -> None:
        """The upstream attempt is over: its connection goes back to the pool or is closed, its route is released."""
        if flight.response is not None:
            if flight.outcome == OK and not flight.cut:
                flight.response.release()  # read to the end: the connection goes back to the pool
            else:
                flight.response.close()  # cut or refused: closing the connection cancels the upstream's work
            flight.response = None
        if flight.route is not None:
            self._gw.router.release(flight.route, flight.outcome)
            flight.route = None

    async def _settle(self, a: Ticket, flight: Flight) -> None:
        gw = self._gw
        usage = flight.usage or (flight.scanner.usage if flight.scanner else None) or {}
        actual_in, actual_out = 0, 0
        if flight.delivered_any:
            actual_in = _int(usage.get("prompt_tokens"), a.prompt.prompt_tokens)
            actual_out = _int(usage.get("completion_tokens"), None)
            if actual_out is None:
                actual_out = self._count_delivered(a, flight)
        elif flight.accepted:  # the client left before any of the answer arrived: the prompt was still taken in
            actual_in = a.prompt.prompt_tokens
        settlement = Settlement(a.tenant.id, a.key.digest, a.parsed.model, a.request_id, a.prompt.prompt_tokens,
                                a.admission.reserved_out, actual_in, actual_out, a.admission.day, a.admission.month,
                                a.lease_end_ms)
        try:
            await gw.store.settle(settlement, a.admission.store)
        except Exception:
            log.exception("settlement of %s failed", a.request_id)
            return
        gw.metrics.child(gw.metrics.tokens, a.tenant.id, "input").inc(actual_in)
        gw.metrics.child(gw.metrics.tokens, a.tenant.id, "output").inc(actual_out)

    def _count_delivered(self, a: Ticket, flight: Flight) -> int:
        text = flight.completion_text
        if text is None:
            text = flight.scanner.delivered_text() if flight.scanner else ""
        tokenizer = self._gw.tokenizers.get(a.model.name)
        if tokenizer is None:
            return estimate_tokens(text)
        return tokenizer.count(text)


async def _abandon(opening: asyncio.Task, flight: Flight) -> None:
    """Cancel an overlapped upstream request the admission did not let through."""
    flight.outcome = NOT_ADMITTED  # first: however the wait below ends, the replica is not blamed
    await _cancel(opening)


async def _cancel(opening: asyncio.Task) -> None:
    """Cancel the opening task and wait for it to unwind (route chosen, connection closed), so that whoever reads
    the flight next sees its final state; its failure, if it had one, is not what the client hears."""
    opening.cancel()
    try:
        await asyncio.wait([opening])
    finally:
        if opening.done() and not opening.cancelled():
            opening.exception()


MAX_USAGE_TOKENS = 2**31 - 1
"""An upstream's usage is clamped here: no request uses more, and Redis' counters must stay integers."""


def _int(value, default):
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return default
    return min(value, MAX_USAGE_TOKENS)


_REQUEST_ID_RE = re.compile(rb"[\x21-\x7e]{1,128}")


def _client_request_id(scope) -> bytes | None:
    """The client's own x-request-id, echoed on the response when it is printable ASCII of at most 128 bytes (the
    store and the replica get the gateway's unique id: a client's need not be unique)."""
    value = header(scope, b"x-request-id")
    return value if value is not None and _REQUEST_ID_RE.fullmatch(value) else None


def _cache_salt(a: Ticket) -> str:
    """Prefix-cache salt. A client's own cache_salt is namespaced by its tenant, so no client can pick another
    tenant's salt; isolate_cache tenants always get their own chain (DESIGN.md, "Tenant isolation")."""
    client_salt = a.parsed.body.get("cache_salt")
    if isinstance(client_salt, str) and client_salt:
        return f"{a.tenant.id}/{client_salt}"
    return a.tenant.cache_salt


def _upstream_body(a: Ticket, salt: str, max_len: int | None) -> bytes:
    body = a.parsed.body
    changes: dict = {}
    if a.model.upstream_model:
        changes["model"] = a.model.upstream_model
    if a.parsed.max_tokens is None:
        # What admission reserved is also the cap: without one the upstream may generate to the end of the
        # context, far past the tenant's output bucket and budgets (within the context, or the upstream refuses it).
        cap = a.tenant.default_max_tokens
        changes["max_tokens"] = cap if max_len is None else max(1, min(cap, max_len - a.prompt.longest_prompt_tokens))
    if a.parsed.stream and not a.parsed.client_wants_usage:
        changes["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
    if salt != (body.get("cache_salt") or ""):
        changes["cache_salt"] = salt
    if a.parsed.body is a.parsed.original_body:  # the input hook changed nothing: the client's bytes go upstream
        if not changes:
            return a.raw_body
        # UTF-8 JSON never holds a raw NUL: one means UTF-16/32, which json.loads takes but a splice would corrupt
        if not any(name in body for name in changes) and b"\x00" not in a.raw_body:
            return _splice(a.raw_body, changes)
    return json.dumps({**body, **changes}).encode()


def _splice(raw_body: bytes, members: dict) -> bytes:
    """`raw_body` (a JSON object with at least one member) with `members` (names it lacks) added after its opening
    brace: re-encoding a long prompt costs ~5 us per KB on the event loop, this costs a copy."""
    start = raw_body.index(b"{") + 1
    return raw_body[:start] + json.dumps(members)[1:-1].encode() + b"," + raw_body[start:]


async def _upstream_error(response: aiohttp.ClientResponse) -> ApiError:
    """An upstream's error answer in OpenAI's format: its own message kept, 5xx mapped to 502/503."""
    try:
        data = await response.read()
    except (aiohttp.ClientError, asyncio.TimeoutError):
        data = b""
    finally:
        response.release()
    message, code = f"The upstream answered HTTP {response.status}.", None
    try:
        error = json.loads(data).get("error")
        if isinstance(error, dict):
            message, code = str(error.get("message") or message), error.get("code")
    except (ValueError, AttributeError):
        pass
    status = response.status
    if status == 503:
        return unavailable(f"The upstream is overloaded: {message}",
                           upstream_retry_after_s(response.headers.get("retry-after")))
    if status >= 500:
        return upstream_failed(f"The upstream failed: {message}")
    return ApiError(status, message, "invalid_request_error", code if isinstance(code, str) else None)
