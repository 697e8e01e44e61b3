"""The gateway's long-lived parts, built once from the config and shared by every request."""

from __future__ import annotations

import asyncio
import importlib
import itertools
import logging
import secrets
from collections.abc import Coroutine
from typing import Any

from gateway.access_log import ACCESS_LOGGER, AccessLog
from gateway.admin.api import tenant_checker
from gateway.admin.audit import AUDIT_LOGGER
from gateway.admin.seed import seed_tenants
from gateway.config import GatewayConfig
from gateway.metrics import GatewayMetrics
from gateway.request.admission import AdmissionControl, AdmissionParts
from gateway.request.attempt import UpstreamLinks
from gateway.request.auth import AuthCache
from gateway.request.guardrail_wiring import build_hooks
from gateway.request.hooks import RequestHooks
from gateway.request.overlap import OverlapGate
from gateway.request.precheck import DeniedKeys
from gateway.request.prefill import PrefillHop
from gateway.request.proxy import EndpointParts
from gateway.request.settlement import SettlementParts
from gateway.request.tokenizer import PromptTokenizer
from gateway.request.upstream import UpstreamPool
from gateway.routing.base import Router
from gateway.routing.discovery import build_discovery
from gateway.store.base import StoreUnavailable
from gateway.store.local import LocalStore
from gateway.store.redis_store import PoolLimits, RedisStore
from gateway.store.resilient import ResilientStore
from sluicegate import json_logs, tracing
from sluicegate.tracing import TracingConfig

log = logging.getLogger(__name__)
SHUTDOWN_SETTLE_TIMEOUT_S = 5.0


def build_store(config: GatewayConfig, metrics: GatewayMetrics) -> LocalStore | ResilientStore:
    if config.redis.url is None:
        return LocalStore()
    pool = PoolLimits(config.redis.pool_max_connections, config.redis.pool_timeout_s)
    redis = RedisStore(
        config.redis.endpoint(),
        config.redis.key_prefix,
        config.redis.socket_timeout_s,
        pool,
        config.redis.lease_heartbeat_s,
    )
    return ResilientStore(
        redis, config.redis.failure_mode, config.redis.retry_interval_s, config.num_instances, metrics
    )


def load_router(config: GatewayConfig, metrics: GatewayMetrics) -> Router:
    module_name, _, attr = config.router.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"router {config.router!r} cannot be loaded ({exc}); want 'module:callable'") from None
    router: Router = factory(config.routing_models, metrics_registry=metrics.registry)
    return router


class Gateway:
    def __init__(self, config: GatewayConfig, hooks: RequestHooks | None = None, router: Router | None = None):
        self.config = config
        self.metrics = GatewayMetrics()
        self.store = build_store(config, self.metrics)
        self.auth = AuthCache(self.store)
        # Overlap only hides a round trip: the in-process store (no Redis) answers without one.
        self.overlap = OverlapGate(config.admission_overlap and config.redis.url is not None)
        self.router = router or load_router(config, self.metrics)
        self.discovery = build_discovery(config.discovery_models, self.router)
        """Replicas found through DNS or EndpointSlices (gateway/routing/discovery/), for models that ask."""
        self.upstreams = UpstreamPool(config.upstream)
        self.hooks = hooks or build_hooks(config.guardrails, self.metrics.registry)
        self.tokenizers: dict[str, PromptTokenizer] = {}
        """Model name -> its tokenizer, loaded in `start`."""
        self.denied = DeniedKeys()
        self._tasks: set[asyncio.Task[None]] = set()
        self._request_prefix = f"req-{secrets.token_hex(4)}-"
        self._request_seq = itertools.count()
        self.endpoint_parts = self._endpoint_parts()
        """The request path's components (gateway/request/), sharing the parts above."""

    def _endpoint_parts(self) -> EndpointParts:
        admission = AdmissionControl(
            AdmissionParts(
                self.config, self.auth, self.store, self.overlap, self.denied, self.hooks, self.tokenizers, self.metrics
            )
        )
        prefill = PrefillHop(self.router, self.upstreams, self.metrics)
        links = UpstreamLinks(self.router, self.upstreams, self.metrics, self.tokenizers, prefill)
        access_log = AccessLog() if self.config.access_log else None
        settlement = SettlementParts(self.store, self.metrics, self.tokenizers, self.spawn, access_log)
        return EndpointParts(
            admission, links, settlement, self.hooks, self.metrics, self.config.debug_headers, self.next_request_id
        )

    async def start(self) -> None:
        # JSON lines on stdout, written off the event loop (sluicegate/json_logs.py)
        json_logs.to_stdout(AUDIT_LOGGER)
        if self.config.access_log:
            json_logs.to_stdout(ACCESS_LOGGER)
        # installs an exporting provider only when an OTLP endpoint is configured; tracing stays off otherwise
        tracing.configure_tracing(
            TracingConfig("sluicegate-gateway", self.config.otlp_endpoint, self.config.trace_sample_ratio)
        )
        for name, model in self.config.models.items():
            if model.tokenizer:
                self.tokenizers[name] = PromptTokenizer(model.tokenizer)
        await self.store.start()
        if self.config.tenants_seed:
            try:
                await seed_tenants(self.store, self.config.tenants_seed, tenant_checker(self))
            except StoreUnavailable:  # start anyway: keys resolve once Redis is back; the next start seeds
                log.warning("redis unreachable at start-up: tenants seed %s not applied", self.config.tenants_seed)
        await self.router.start()
        await self.discovery.start()

    async def close(self) -> None:
        await self.discovery.close()  # first: no look-up outlives the gateway however long settlements take
        cut = list(self.endpoint_parts.open_requests)
        if cut:  # cancelled by the server at the end of its drain: they end their answers and hand over settlements
            await asyncio.wait(cut, timeout=SHUTDOWN_SETTLE_TIMEOUT_S)
        if self._tasks:  # settlements in flight: let them land
            await asyncio.wait(list(self._tasks), timeout=SHUTDOWN_SETTLE_TIMEOUT_S)
        await self.router.close()
        await self.upstreams.close()
        await self.store.close()
        self.metrics.close()
        await asyncio.to_thread(json_logs.flush)  # the settlements' access-log lines, before a signal ends us

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def admin_changed(self, tenant_id: str) -> None:
        """The admin API changed this tenant or one of its keys: drop what this instance caches of it, so the next
        request sees the change (other instances see it through the admission script's generation counter)."""
        self.auth.forget_tenant(tenant_id)
        self.overlap.forget_tenant(tenant_id)
        self.denied.forget_tenant(tenant_id)

    def next_request_id(self) -> str:
        return self._request_prefix + str(next(self._request_seq))
