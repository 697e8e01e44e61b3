"""The OpenAI endpoints (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses) as plain ASGI: the
request path end to end. A /v1/responses request is a chat request from parsing on (sluicegate/responses/): only its
answer is translated back, after the output guardrails.

Reservation (settlement.py)                     entered first, left last: settles exactly once
  AdmissionControl.prepare (admission.py)       auth, pre-check, input guardrails          -> AUTHED
  AdmissionControl.admit                        tokenize, admission (+ overlapped open)    -> ADMITTED
  AdmissionControl.cleared                      checks run alongside the open (if any)
  UpstreamAttempt.opened (attempt.py)           route, send, fail over                     -> ROUTED
  relay JSON or SSE (this module, stream.py)    output guardrails, usage                   -> STREAMING
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from starlette.types import Receive, Scope, Send

from gateway.asgi import JSON, ClientGone, header, send_bytes, send_error
from gateway.errors import ApiError, retry_after, upstream_failed, upstream_timeout
from gateway.metrics import GatewayMetrics
from gateway.request.admission import AdmissionControl
from gateway.request.attempt import UpstreamAttempt, UpstreamLinks
from gateway.request.context import Outcome, RequestContext, RequestPhase
from gateway.request.hooks import RequestHooks
from gateway.request.parse import CHAT, COMPLETIONS, EMBEDDINGS, RESPONSES
from gateway.request.refusals import RefusalLog
from gateway.request.settlement import Reservation, SettlementParts, usage_as_billed
from gateway.request.spans import stage
from gateway.request.stream import StreamScanner, choice_texts, error_event
from gateway.request.usage import completion_count
from gateway.request_ids import REQUEST_ID, client_request_id
from sluicegate.responses import ResponseHead, ResponsesStream, response_object, responses_names

_PATHS = {
    CHAT: "/v1/chat/completions",
    COMPLETIONS: "/v1/completions",
    EMBEDDINGS: "/v1/embeddings",
    RESPONSES: "/v1/responses",
}
_UPSTREAM_PATHS = {**_PATHS, RESPONSES: _PATHS[CHAT]}
"""What the replica is asked: a Responses request goes upstream as the chat request it maps onto."""
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


@dataclass(frozen=True, slots=True)
class EndpointParts:
    """The request path's components, built once at start-up (runtime.py)."""

    admission: AdmissionControl
    links: UpstreamLinks
    settlement: SettlementParts
    hooks: RequestHooks
    metrics: GatewayMetrics
    debug_headers: bool
    next_request_id: Callable[[], str]
    refusals: RefusalLog = field(default_factory=RefusalLog)
    """The last refusals, for the admin console (refusals.py)."""
    open_requests: set[asyncio.Task[Any]] = field(default_factory=set)
    """The completion requests being served: at shutdown the runtime waits for those the server cancelled to end
    their answer and hand over their settlement (runtime.close)."""


class CompletionsEndpoint:
    def __init__(self, parts: EndpointParts, kind: str) -> None:
        self._parts = parts
        self._kind = kind
        self._path = _PATHS[kind]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        received_s = time.perf_counter()
        p = self._parts
        request_id = p.next_request_id()
        shown_request_id = client_request_id(scope) or request_id.encode()
        if scope["method"] != "POST":
            error = ApiError(405, f"Use POST for {self._path}.", code="method_not_allowed")
            await send_error(send, error, [(REQUEST_ID, shown_request_id)])
            return
        encoding = header(scope, b"content-encoding")
        if encoding is not None and encoding.strip().lower() != b"identity":  # read as JSON, gzip is "not valid JSON"
            error = ApiError(
                415,
                f"Content-Encoding {encoding.decode('latin-1')!r} is not supported: send the JSON body uncompressed.",
                code="unsupported_content_encoding",
            )
            await send_error(send, error, [(REQUEST_ID, shown_request_id)])
            return
        ctx = RequestContext(self._kind, request_id, shown_request_id, received_s, header(scope, b"traceparent"))
        attempt = UpstreamAttempt(p.links, _UPSTREAM_PATHS[self._kind])
        task = asyncio.current_task()
        assert task is not None  # ASGI servers call us inside a task
        p.open_requests.add(task)
        try:
            await self._serve(ctx, attempt, task, scope, receive, send)
        finally:
            p.open_requests.discard(task)

    async def _serve(
        self,
        ctx: RequestContext,
        attempt: UpstreamAttempt,
        task: asyncio.Task[Any],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        p = self._parts
        async with Reservation(p.settlement, ctx, attempt):
            try:
                await p.admission.prepare(ctx, header(scope, b"authorization"), receive)
                await p.admission.admit(ctx, attempt)
                await p.admission.cleared(ctx, attempt)
            except ApiError as error:
                ctx.delivery.status, ctx.delivery.error_code = error.status, error.code or error.type
                p.refusals.record(ctx, error, header(scope, b"authorization"))
                await send_error(send, self._named(ctx, error), [(REQUEST_ID, ctx.shown_request_id)])
                return
            except ClientGone:
                return
            finally:
                _drop(ctx.alongside)
            await self._forward(ctx, attempt, task, receive, send)

    async def _forward(
        self, ctx: RequestContext, attempt: UpstreamAttempt, task: asyncio.Task[Any], receive: Receive, send: Send
    ) -> None:
        """Steps 6-7: wait for the replica's answer and relay it, until it ends or the client leaves.

        A client that leaves a stream cuts it: the watcher cancels `task` (the request's own), the upstream
        connection closes and the replica stops; the tenant is charged what was generated. A client that leaves a
        non-streamed request does not stop it: the replica could only be stopped without saying what it had
        generated, so the tenant would pay nothing for work the replica did (a short client timeout plus retries
        would buy generation for free). The answer is read to the end and dropped, and the tenant is charged its
        usage, as OpenAI charges a request whose client timed out."""
        delivery = ctx.delivery

        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            delivery.client_gone = True
            if ctx.parsed.stream:
                task.cancel()

        watcher = asyncio.get_running_loop().create_task(watch_disconnect())
        try:
            with stage("upstream"):
                await attempt.opened(ctx)
            if self._parts.debug_headers and attempt.route is not None:
                ctx.headers += [
                    (b"x-sluicegate-replica", attempt.route.replica.encode()),
                    (b"x-sluicegate-prefix-tokens", str(attempt.route.matched_prefix_tokens).encode()),
                ]
                if attempt.prefill_replica is not None:
                    ctx.headers.append((b"x-sluicegate-prefill-replica", attempt.prefill_replica.encode()))
            with stage("stream"):
                if ctx.parsed.stream:
                    await self._relay_stream(ctx, attempt, send)
                else:
                    await self._relay_json(ctx, attempt, send)
        except ApiError as error:
            delivery.status, delivery.error_code = error.status, error.code or error.type
            if not delivery.client_gone:  # a non-streamed request whose client left: nobody to tell
                await send_error(send, self._named(ctx, error), ctx.headers)
        except asyncio.CancelledError:
            if delivery.client_gone:
                attempt.outcome, delivery.status = Outcome.CLIENT_DISCONNECT, 499
            else:  # the server's drain timed out (gateway.drain_timeout_s): end the answer in a way clients read
                await self._cut_by_shutdown(ctx, attempt, send)
        except OSError:  # servers other than uvicorn raise on a send to a client that has gone
            attempt.outcome, delivery.status = Outcome.CLIENT_DISCONNECT, 499
        finally:
            watcher.cancel()
            await attempt.stop_opening()  # the client left while it was still opening

    def _named(self, ctx: RequestContext, error: ApiError) -> ApiError:
        """A /v1/responses request was checked, and sent upstream, as the chat request it maps onto: its errors name
        the fields its client sent (max_output_tokens, input, text.format), not the chat body's. Parsing names its
        own (parse_responses): a client that sent `max_tokens` there is told that `max_tokens` is unknown."""
        if self._kind == RESPONSES and ctx.phase >= RequestPhase.AUTHED:
            error.message, error.param = responses_names(error.message, error.param)
        return error

    async def _cut_by_shutdown(self, ctx: RequestContext, attempt: UpstreamAttempt, send: Send) -> None:
        """A stream under way ends with an error event, an answer not yet started is a 503: the client learns why
        (not a connection closed mid-chunk), and the request is logged and settled like any other that failed."""
        message = "The gateway is shutting down and its drain time is over; retry the request."
        if ctx.delivery.status == 200 and ctx.parsed.stream:  # the SSE head was sent
            attempt.outcome = Outcome.ERROR_MID_STREAM
            tail = error_event(message, "service_unavailable")
            if (responses := ctx.delivery.responses_stream) is not None:
                tail = responses.feed(tail) + responses.close()
            await send({"type": "http.response.body", "body": tail, "more_body": False})
            return
        error = ApiError(503, message, code="service_unavailable", headers=retry_after(1.0))
        ctx.delivery.status, ctx.delivery.error_code = error.status, error.code
        await send_error(send, error, ctx.headers)

    async def _relay_json(self, ctx: RequestContext, attempt: UpstreamAttempt, send: Send) -> None:
        response, delivery, metrics = attempt.response, ctx.delivery, self._parts.metrics
        assert response is not None  # opened: the replica answered 2xx
        try:
            data = await response.read()
            attempt.first_token()
        except TimeoutError:
            raise upstream_timeout("The upstream stopped answering.") from None
        except aiohttp.ClientError as exc:
            raise upstream_failed(f"The upstream failed while answering: {type(exc).__name__}.") from None
        try:
            obj = json.loads(data)
        except ValueError:
            raise upstream_failed("The upstream answered with invalid JSON.") from None
        usage = obj.get("usage") if isinstance(obj, dict) else None
        delivery.usage = usage if isinstance(usage, dict) else None
        shown = usage_as_billed(delivery.usage, delivery) if delivery.usage is not None else None
        if shown is not None:  # a prefill replica computed what the decode replica calls cached
            data = json.dumps({**obj, "usage": shown}, ensure_ascii=False).encode()
        if completion_count(delivery.usage) is None:  # no usable count: settle by the text
            delivery.completion_text = "".join(choice_texts(obj, streaming=False))
        # The replica answered: it is healthy and the tenant used its tokens, even if the output check blocks.
        attempt.outcome, delivery.status = Outcome.OK, response.status
        delivery.delivered_any = True
        if delivery.client_gone:  # nobody to answer: the usage above is what it was read for; the replica did no wrong
            delivery.status = 499
            return
        data = await self._parts.hooks.check_output(ctx.tenant, ctx.parsed.kind, data)
        if ctx.parsed.responses is not None:
            head = ResponseHead.new(ctx.parsed.model, ctx.parsed.responses)
            data = json.dumps(response_object(json.loads(data), head), ensure_ascii=False).encode()
        ctx.phase = RequestPhase.STREAMING
        await send_bytes(send, response.status, data, [JSON, *ctx.headers])
        metrics.child(metrics.ttft, ctx.parsed.model).observe(time.perf_counter() - ctx.received_s)

    async def _relay_stream(self, ctx: RequestContext, attempt: UpstreamAttempt, send: Send) -> None:
        response, delivery, metrics = attempt.response, ctx.delivery, self._parts.metrics
        assert response is not None  # opened: the replica answered 2xx
        scanner = delivery.scanner = StreamScanner(
            strip_usage=not ctx.parsed.client_wants_usage, rewrite_usage=lambda usage: usage_as_billed(usage, delivery)
        )
        transformer = self._parts.hooks.output_transformer(ctx.tenant, ctx.parsed.kind, ctx.parsed.body)
        responses = None
        if ctx.parsed.responses is not None:
            responses = ResponsesStream(ResponseHead.new(ctx.parsed.model, ctx.parsed.responses))
            delivery.responses_stream = responses
        delivery.status = 200
        ctx.phase = RequestPhase.STREAMING
        await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *ctx.headers]})
        inter_chunk = metrics.child(metrics.inter_chunk, ctx.parsed.model)
        last_sent = 0.0
        tail = b""
        awaiting_first_token = True
        try:
            async for chunk in response.content.iter_any():
                # A chat stream opens with role deltas written before the prefill runs; the first chunk without one
                # carries the first token (a chunk holding both only delays the hook by a chunk).
                if awaiting_first_token and b'"role"' not in chunk:
                    attempt.first_token()
                    awaiting_first_token = False
                data = scanner.feed(chunk)
                if transformer is not None:
                    data = transformer.feed(data)
                    attempt.cut = transformer.blocked
                if responses is not None:
                    data = responses.feed(data)
                if data:
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                    now = time.perf_counter()
                    if last_sent:
                        inter_chunk.observe(now - last_sent)
                    else:
                        metrics.child(metrics.ttft, ctx.parsed.model).observe(now - ctx.received_s)
                        delivery.delivered_any = True
                    last_sent = now
                if attempt.cut:  # blocked: stop reading, so the upstream stops generating what nobody will see
                    break
        except (TimeoutError, aiohttp.ClientError) as exc:
            metrics.child(metrics.upstream_errors, "mid_stream").inc()
            tail = error_event(f"The upstream failed mid-stream: {type(exc).__name__}.", "upstream_error")
        else:
            if not scanner.saw_done and not attempt.cut:
                metrics.child(metrics.upstream_errors, "mid_stream").inc()
                tail = error_event("The upstream ended the stream early.", "upstream_error")
        delivery.usage = scanner.usage
        attempt.outcome = Outcome.ERROR_MID_STREAM if tail else Outcome.OK
        if transformer is not None:
            tail = transformer.flush() + tail
        if responses is not None:
            tail = responses.feed(tail) + responses.close()
        await send({"type": "http.response.body", "body": tail, "more_body": False})


def _drop(checks: asyncio.Task[None] | None) -> None:
    """Input checks left behind by a refusal that came first (a PII block, a 429): cancelled if still running, their
    outcome read if not (an unread exception would be logged as never retrieved)."""
    if checks is None:
        return
    if not checks.done():
        checks.cancel()
    elif not checks.cancelled():
        checks.exception()
