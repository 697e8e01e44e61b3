"""`sluicegate gateway --config config/gateway.yaml [--host H] [--port P] [--workers N]`."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING

from gateway.admin.seed import load_seed
from gateway.admin.tenants import check_models_served
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.errors import ApiError
from gateway.metrics import MULTIPROC_DIR_ENV

if TYPE_CHECKING:
    from sluicegate.tracing import TracingMiddleware


KEEP_ALIVE_S = 75
"""How long an idle client connection stays open. Above the clients' own idle expiry (httpx and so the openai
client: 5 s; load balancers: 60 s), so the client always gives a connection up first: at uvicorn's default of 5 s
both ends let go at once, and a request sent just then meets a closing socket ("Server disconnected without sending
a response"). nginx keeps 75 s."""


def _app_factory() -> TracingMiddleware:
    """uvicorn --workers needs an import string: each worker rebuilds the app from the same config file. Each
    worker is a gateway instance of its own (its own fail-open buckets), so num_instances counts them all."""
    from gateway.app import build_app

    config = load_config(os.environ["SLUICEGATE_GATEWAY_CONFIG"])
    workers = int(os.environ.get("SLUICEGATE_GATEWAY_WORKERS", "1"))
    return build_app(
        config.model_copy(update={"num_instances": config.num_instances * workers, "workers": workers}),
        owns_process=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sluicegate gateway", description="Run the Sluicegate gateway.")
    parser.add_argument("--config", default="config/gateway.yaml", help="gateway YAML (default: %(default)s)")
    parser.add_argument("--host", help="override the config's host")
    parser.add_argument("--port", type=int, help="override the config's port")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (one event loop each)")
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["critical", "error", "warning", "info", "debug"],
        help="the gateway's and uvicorn's log level (default: %(default)s); the access and audit logs (JSON lines on "
        "stdout) are written at any level",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
        if config.tenants_seed:  # a bad seed must stop start-up here, not inside the server's lifespan
            for tenant in load_seed(config.tenants_seed).tenants:
                check_models_served(tenant.models, config.models)  # a typo would leave the tenant nothing
    except ConfigError as exc:
        print(f"sluicegate gateway: {exc}", file=sys.stderr)
        return 2
    except ApiError as exc:
        print(f"sluicegate gateway: tenants seed {config.tenants_seed!r}: {exc.message}", file=sys.stderr)
        return 2
    host = args.host or config.host
    port = config.port if args.port is None else args.port  # 0: a free port, as `port: 0` in the config

    import uvicorn

    # No proxy-headers rewrite (the gateway never reads the client address: it would be per-request work for
    # nothing) and no `server:` header advertising the stack.
    common = dict(
        timeout_keep_alive=KEEP_ALIVE_S,
        host=host,
        port=port,
        loop="uvloop",
        http="auto",
        log_level=args.log_level,
        access_log=False,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=config.drain_timeout_s,
    )
    if args.workers > 1:
        if config.redis.url is None:
            print(
                "sluicegate gateway: --workers needs Redis (redis.url or REDIS_URL): without it each worker would "
                "keep tenants, keys and buckets of its own",
                file=sys.stderr,
            )
            return 2
        # set before the workers start (and import prometheus_client): /metrics then reports every worker
        metrics_dir = tempfile.mkdtemp(prefix="sluicegate-metrics-")
        settings = {
            "SLUICEGATE_GATEWAY_CONFIG": args.config,
            "SLUICEGATE_GATEWAY_WORKERS": str(args.workers),
            MULTIPROC_DIR_ENV: metrics_dir,
        }
        before = {name: os.environ.get(name) for name in settings}
        os.environ.update(settings)
        try:
            uvicorn.run("gateway.cli:_app_factory", factory=True, workers=args.workers, **common)
        finally:  # a gateway built later in this process must not find a deleted metrics directory
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            shutil.rmtree(metrics_dir, ignore_errors=True)
        return 0
    from gateway.app import build_app

    try:
        app = build_app(config, owns_process=True)
    except ValueError as exc:
        print(f"sluicegate gateway: {exc}", file=sys.stderr)
        return 2
    from gateway.announced_server import AnnouncedServer

    AnnouncedServer(uvicorn.Config(app, **common), served=_served(config)).run()
    return 0


def _served(config: GatewayConfig) -> str:
    models = ", ".join(config.models) or "none"
    store = "Redis" if config.redis.url else "in this process, no Redis"
    return f"models: {models}; quotas: {store}"
