"""The replica's Starlette app: OpenAI endpoints, health, metrics, tokenize, and the KV events feed
(docs/architecture.md, "Engine replica HTTP API"). `create_app(llm_engine, config)` wraps an already loaded
LLMEngine; the engine thread starts with the app's lifespan and stops with it.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.pooling import Pooling
from engine.server import embeddings, generation, kv_events, protocol, responses, sse
from engine.server.async_engine import AsyncEngine
from engine.server.config import ServerConfig
from engine.server.errors import (
    APIError,
    BodyTooLargeError,
    HTTPStatusError,
    InternalServerError,
    ModelNotFoundError,
    OverloadedError,
)
from engine.server.formats import ChatFormat, CompletionFormat
from engine.server.kv_events import KVEventHub
from engine.server.kv_transfer import METADATA_PATH, KVTransferService
from engine.server.kv_transfer_metrics import KVTransferMetrics
from engine.server.metrics import CONTENT_TYPE, ServerMetrics
from engine.server.request_context import RequestContextMiddleware, context_of
from engine.server.request_log import REQUEST_LOGGER, RequestLogMiddleware
from engine.server.tokenization import Tokenization
from engine.tools.parsers import tool_parser
from sluicegate import json_logs, tracing
from sluicegate.tracing import TracingMiddleware

logger = logging.getLogger(__name__)


class Replica:
    """Everything the handlers share. Lives on the event loop."""

    def __init__(self, llm_engine, config: ServerConfig, tokenization: Tokenization, on_fatal: Callable):
        self.config = config
        self.model_name: str = llm_engine.model_name
        self.max_model_len: int = llm_engine.max_model_len
        self.block_size: int = llm_engine.block_size
        self.hidden_size: int = llm_engine.spec.hidden_size
        self.created = int(time.time())
        self.tokenization = tokenization
        # The engine thread has not started: reading its stats here races nothing, and /metrics is whole from start-up.
        self.metrics = ServerMetrics(self.model_name, initial_stats=copy.copy(llm_engine.stats()))
        self.kv_hub = KVEventHub()
        self.engine = AsyncEngine(
            llm_engine, self.metrics, self.kv_hub, config.max_waiting_requests, config.retry_after_s, on_fatal
        )
        self.completion_format = CompletionFormat(tokenization)
        self.chat_format = ChatFormat(tokenization)
        self.tool_parser = tool_parser(config.tool_call_parser) if config.tool_call_parser else None
        self.draining = False
        self.kv_transfer = _kv_transfer(llm_engine, config, self.engine, self.metrics)

    def begin_drain(self) -> None:
        """Stop admitting (503 + Retry-After, /health fails so routers move away); in-flight requests go on."""
        self.draining = True
        self.kv_hub.close()

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.model_name:
            raise ModelNotFoundError(model)

    def check_admitting(self) -> None:
        if self.draining:
            self.metrics.request_rejected("draining")
            raise OverloadedError("This replica is shutting down; retry on another.", self.config.retry_after_s)


def create_app(llm_engine, config: ServerConfig, on_fatal: Callable[[BaseException], None] | None = None) -> Starlette:
    # A copy, so the server never shares a tokenizer with the engine thread.
    tokenization = Tokenization(copy.deepcopy(llm_engine.tokenizer))
    replica = Replica(llm_engine, config, tokenization, on_fatal or (lambda exc: None))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if config.request_log:
            json_logs.to_stdout(REQUEST_LOGGER)  # JSON lines, written off the event loop
        replica.engine.start()
        if replica.kv_transfer is not None:
            await replica.kv_transfer.start()
        try:
            yield
        finally:
            replica.begin_drain()
            if replica.kv_transfer is not None:
                await replica.kv_transfer.close()
            await replica.engine.stop()
            tokenization.close()

    app = Starlette(
        routes=_routes(),
        middleware=[
            Middleware(TracingMiddleware, scope_name="engine", span_name=tracing.ENGINE_REQUEST),
            Middleware(RequestContextMiddleware),
            Middleware(RequestLogMiddleware, model=replica.model_name, enabled=config.request_log),
        ],
        exception_handlers={APIError: _api_error, HTTPException: _http_error, Exception: _internal_error},
        lifespan=lifespan,
    )
    # A trailing slash is a 404 like any unknown path, not a redirect with an empty body built from the Host header.
    app.router.redirect_slashes = False
    app.state.replica = replica
    return app


def _routes() -> list[Route]:
    return [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/responses", responses_endpoint, methods=["POST"]),
        Route("/v1/embeddings", embeddings_endpoint, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/v1/kv/events", kv_events_feed, methods=["GET"]),
        Route(METADATA_PATH, kv_transfer_metadata, methods=["GET"]),
    ]


def _replica(request: Request) -> Replica:
    return request.app.state.replica


async def completions(request: Request) -> Response:
    replica = _replica(request)
    body = protocol.parse_json(await _read_body(request, replica.config.max_request_body_bytes))
    return await _generate(request, replica, protocol.parse_completion(body), replica.completion_format)


async def chat_completions(request: Request) -> Response:
    replica = _replica(request)
    body = protocol.parse_json(await _read_body(request, replica.config.max_request_body_bytes))
    return await _generate(request, replica, protocol.parse_chat(body, replica.tool_parser), replica.chat_format)


async def responses_endpoint(request: Request) -> Response:
    replica = _replica(request)
    body = protocol.parse_json(await _read_body(request, replica.config.max_request_body_bytes))

    async def generate_chat(chat: dict) -> Response:
        return await _generate(request, replica, protocol.parse_chat(chat, replica.tool_parser), replica.chat_format)

    return await responses.serve(body, replica.model_name, generate_chat)


async def _generate(request: Request, replica: Replica, parsed: protocol.GenerateRequest, fmt) -> Response:
    replica.check_model(parsed.model)
    replica.check_admitting()
    context = context_of(request.scope)
    return await generation.serve(
        request, parsed, fmt, replica.engine, replica.tokenization, replica.model_name, context.arrival_time_s,
        replica.kv_transfer,
    )  # fmt: skip


async def embeddings_endpoint(request: Request) -> Response:
    replica = _replica(request)
    parsed = protocol.parse_embeddings(
        protocol.parse_json(await _read_body(request, replica.config.max_request_body_bytes))
    )
    replica.check_model(parsed.model)
    replica.check_admitting()
    return await embeddings.serve(
        request,
        parsed,
        replica.engine,
        replica.tokenization,
        replica.model_name,
        Pooling(replica.config.embedding_pooling),
        replica.hidden_size,
        context_of(request.scope).arrival_time_s,
    )


async def models(request: Request) -> Response:
    replica = _replica(request)
    card = {
        "id": replica.model_name,
        "object": "model",
        "created": replica.created,
        "owned_by": "sluicegate",
        "root": replica.model_name,
        "max_model_len": replica.max_model_len,
    }
    return JSONResponse({"object": "list", "data": [card]})


async def health(request: Request) -> Response:
    replica = _replica(request)
    if not replica.engine.alive:
        return JSONResponse({"status": "dead"}, status_code=503)
    if replica.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    return JSONResponse({"status": "ok"})


async def metrics(request: Request) -> Response:
    return Response(_replica(request).metrics.render(), media_type=CONTENT_TYPE)


async def tokenize(request: Request) -> Response:
    replica = _replica(request)
    body = protocol.parse_json(await _read_body(request, replica.config.max_request_body_bytes))
    parsed = protocol.parse_tokenize(body)
    replica.check_model(parsed.model)
    if parsed.messages is not None:
        tokens = await replica.tokenization.encode_chat(parsed.messages, parsed.add_generation_prompt)
    else:
        assert parsed.prompt is not None  # parse_tokenize requires prompt or messages
        tokens = await replica.tokenization.encode(parsed.prompt, parsed.add_special_tokens)
    return JSONResponse({"count": len(tokens), "max_model_len": replica.max_model_len, "tokens": tokens})


async def detokenize(request: Request) -> Response:
    replica = _replica(request)
    body = protocol.parse_json(await _read_body(request, replica.config.max_request_body_bytes))
    tokens = protocol.parse_detokenize(body, replica.tokenization.vocab_size)
    replica.check_model(body.get("model") if isinstance(body.get("model"), str) else None)
    return JSONResponse({"prompt": await replica.tokenization.decode(tokens)})


async def kv_events_feed(request: Request) -> Response:
    replica = _replica(request)
    replica.check_admitting()
    subscription = replica.kv_hub.subscribe()
    try:
        snapshot = await replica.engine.kv_snapshot()
    except BaseException:
        replica.kv_hub.unsubscribe(subscription)
        raise
    return sse.response(
        kv_events.stream(replica.kv_hub, subscription, snapshot, replica.block_size, replica.model_name)
    )


async def kv_transfer_metadata(request: Request) -> Response:
    """A prefill replica's NIXL agent and KV layout, read once by each decode replica that pulls from it."""
    service = _replica(request).kv_transfer
    if service is None or service.role != "prefill":
        raise HTTPException(404, "This replica hands off no KV blocks (it does not run with --kv-role prefill).")
    return JSONResponse(service.connector.metadata())


def _kv_transfer(llm_engine, config: ServerConfig, engine: AsyncEngine, metrics: ServerMetrics):
    """The transfer side of a prefill or decode replica (NIXL registers the KV pool now, once); None for both."""
    role = llm_engine.config.kv_role
    if role == "both":
        return None
    from engine.kv_transfer.nixl_connector import NixlConnector  # only replicas that transfer need NIXL

    connector = NixlConnector(llm_engine.kv_cache, llm_engine.block_size)
    return KVTransferService(
        connector, engine, KVTransferMetrics(metrics.registry, llm_engine.model_name), role,
        config.kv_transfer_host, config.kv_transfer_read_timeout_s,
    )  # fmt: skip


async def _read_body(request: Request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise BodyTooLargeError(max_bytes)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_bytes:
            raise BodyTooLargeError(max_bytes)
    return bytes(body)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)  # registered for APIError only
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)  # registered for HTTPException only
    return HTTPStatusError(exc.status_code, str(exc.detail), headers=exc.headers).response()


async def _internal_error(request: Request, exc: Exception) -> Response:
    logger.exception("unhandled error serving %s", request.url.path)
    return InternalServerError("Internal server error.").response()
