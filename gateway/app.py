"""The gateway's ASGI app: the OpenAI endpoints (plain ASGI, the hot path), /v1/models, /health, /metrics and the
admin API, with every error, unknown paths included, in OpenAI's format."""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.admin.api import admin_routes
from gateway.admin.console import console_routes
from gateway.asgi import send_error
from gateway.config import GatewayConfig
from gateway.errors import ApiError, unknown_model
from gateway.request.hooks import RequestHooks
from gateway.request.parse import CHAT, COMPLETIONS, EMBEDDINGS, RESPONSES
from gateway.request.proxy import CompletionsEndpoint
from gateway.request_ids import REQUEST_ID, RequestIdMiddleware, client_request_id
from gateway.routing.base import Router
from gateway.runtime import Gateway
from sluicegate.tracing import GATEWAY_REQUEST, TracingMiddleware

log = logging.getLogger(__name__)


def _error(error: ApiError) -> Response:
    return Response(error.body(), error.status, headers=error.headers, media_type="application/json")


class _FastPaths:
    """The OpenAI endpoints straight from the server, past Starlette's middleware and router (~50 us a
    request); everything else, lifespan included, goes to the Starlette app (which gets `x-request-id` on every
    response from RequestIdMiddleware; the endpoints set their own)."""

    def __init__(
        self, app: Starlette, endpoints: dict[str, CompletionsEndpoint], next_request_id: Callable[[], str]
    ) -> None:
        self.app: ASGIApp = RequestIdMiddleware(app, next_request_id)
        self.state = app.state
        self._endpoints = endpoints
        self._next_request_id = next_request_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self._endpoints.get(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        try:
            await endpoint(scope, receive, send)
        except Exception:  # the endpoints answer every expected error themselves; this is the last resort
            log.exception("unhandled error on %s", scope["path"])
            try:
                request_id = client_request_id(scope) or self._next_request_id().encode()
                error = ApiError(500, "The gateway failed unexpectedly.", "server_error")
                await send_error(send, error, [(REQUEST_ID, request_id)])
            except Exception:  # noqa: BLE001 - the response had already started; nothing more to tell the client
                pass


async def _console_home(request: Request) -> Response:
    # What an operator types: a path-only Location (never one built from the Host header).
    return RedirectResponse("/admin/", status_code=307)


def _model(name: str) -> dict[str, str | int]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "sluicegate"}


GC_YOUNG_THRESHOLD = 20_000
"""Allocations between young-generation collections (Python's default: 700). A request allocates a few hundred
objects that reference counting frees; at 700 the collector ran about twice a request and took ~9% of the gateway's
CPU under load (gc.callbacks, `sluicegate bench gateway`) to find almost nothing."""


def quiet_collector() -> None:
    """Start-up state (config, tokenizers, compiled templates, routing tables) lives as long as the process: frozen
    out of the collector's sight so no full collection rescans it, and young collections run far less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def build_app(
    config: GatewayConfig, hooks: RequestHooks | None = None, router: Router | None = None, owns_process: bool = False
) -> TracingMiddleware:
    """`owns_process`: the app is the process's server (the CLI), so it may tune the garbage collector at start-up;
    an app built inside another program (tests, an embedding service) leaves the collector alone."""
    gw = Gateway(config, hooks, router)

    async def allowed_models(request: Request) -> list[str]:
        key, _ = await gw.auth.authenticate_fresh(request.headers.get("authorization", "").encode("latin-1"))
        tenant = await gw.auth.refresh_tenant(key.tenant_id)  # not the hot path: always the current list
        return [m for m in gw.router.models() if tenant.allows(m)]

    async def models(request: Request) -> Response:
        try:
            names = await allowed_models(request)
        except ApiError as error:
            return _error(error)
        return JSONResponse({"object": "list", "data": [_model(m) for m in names]})

    async def model(request: Request) -> Response:
        name = request.path_params["model"]
        try:
            if name not in await allowed_models(request):  # one the tenant may not use is as unknown as OpenAI's
                raise unknown_model(name)
        except ApiError as error:
            return _error(error)
        return JSONResponse(_model(name))

    async def health(request: Request) -> Response:
        redis_up = gw.store.redis_up  # None: the in-process store, no Redis configured
        return JSONResponse({"status": "ok", "redis": "none" if redis_up is None else "up" if redis_up else "down"})

    async def metrics(request: Request) -> Response:
        return Response(gw.metrics.render(), media_type="text/plain; version=0.0.4")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)  # registered for HTTPException only
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return _error(ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", code=code))

    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path)
        return _error(ApiError(500, "The gateway failed unexpectedly; the request was not charged.", "server_error"))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await gw.start()
        if owns_process:
            quiet_collector()
        try:
            yield
        finally:
            await gw.close()

    completions = {
        "/v1/chat/completions": CompletionsEndpoint(gw.endpoint_parts, CHAT),
        "/v1/completions": CompletionsEndpoint(gw.endpoint_parts, COMPLETIONS),
        "/v1/embeddings": CompletionsEndpoint(gw.endpoint_parts, EMBEDDINGS),
        "/v1/responses": CompletionsEndpoint(gw.endpoint_parts, RESPONSES),
    }
    app = Starlette(
        routes=[
            *(Route(path, endpoint) for path, endpoint in completions.items()),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/models/{model:path}", model, methods=["GET"]),  # names may hold '/' (org/model)
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/admin", _console_home, methods=["GET"]),
            Mount("/admin/v1", routes=admin_routes(gw)),
            Mount("/admin", routes=console_routes(gw)),  # the web console (admin/console/); after /admin/v1
        ],
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
    # A path with a trailing slash is a 404 like any unknown path, not Starlette's redirect: that one answers with an
    # empty body and a Location built from the client's Host header.
    app.router.redirect_slashes = False
    app.state.gateway = gw
    traced = TracingMiddleware(_FastPaths(app, completions, gw.next_request_id), "gateway", GATEWAY_REQUEST)
    traced.state = app.state
    return traced
