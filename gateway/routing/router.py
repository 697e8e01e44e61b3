"""`PrefixRouter`: the gateway's `Router` (base.py) over one `ModelRouter` per model, plus the admin operations."""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry

from gateway.routing.base import NoHealthyReplicaError, ReplicaInfo, Role, Route, RouteRequest
from gateway.routing.config import ModelRoutingConfig, ReplicaConfig, parse_model_config
from gateway.routing.metrics import RoutingMetrics
from gateway.routing.model_router import ModelRouter, UnknownReplicaError


class PrefixRouter:
    def __init__(self, configs: dict[str, ModelRoutingConfig], metrics_registry: CollectorRegistry | None = None):
        self.metrics = RoutingMetrics(metrics_registry)
        self._models: dict[str, ModelRouter] = {m: ModelRouter(c, self.metrics) for m, c in configs.items()}
        self._client: httpx.AsyncClient | None = None

    async def start(self) -> None:
        # One pooled client for probes and feeds; a feed holds its connection open, hence no pool limit.
        self._client = httpx.AsyncClient(limits=httpx.Limits(max_connections=None, max_keepalive_connections=32))
        for router in self._models.values():
            router.start(self._client)

    async def close(self) -> None:
        for router in self._models.values():
            await router.close()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def models(self) -> list[str]:
        return [m for m, router in self._models.items() if router.replicas]

    def disaggregated(self, model: str) -> bool:
        router = self._models.get(model)
        return router is not None and router.disaggregated

    def route(self, request: RouteRequest, exclude: frozenset[str] = frozenset()) -> Route:
        router = self._models.get(request.model)
        if router is None:
            raise NoHealthyReplicaError(request.model)
        return router.route(request, exclude)

    def first_token(self, route: Route) -> None:
        """The request path saw the routed request's first byte (its prefill is done); the expected_ttft policy's
        queue estimate drops its prompt then instead of at release."""
        for router in self._models.values():
            if router.owns(route.ticket):
                router.first_token(route)
                return

    def release(self, route: Route, outcome: str) -> None:
        for router in self._models.values():
            if router.owns(route.ticket):
                router.release(route, outcome)
                return

    # -- admin API ---------------------------------------------------------------------------------------------------

    def add_replica(
        self, model: str, name: str, url: str, kv_events: bool = True, role: Role = Role.BOTH
    ) -> ReplicaInfo:
        """Add a replica (a model not seen before starts with default routing settings). A first prefill replica
        makes the model disaggregated from its next request on."""
        config = ReplicaConfig(name=name, url=url, kv_events=kv_events, role=role)
        router = self._models.get(model)
        if router is None:
            router = ModelRouter(parse_model_config(model, {"replicas": []}), self.metrics)
            self._models[model] = router
            if self._client is not None:
                router.start(self._client)
        return router.add_replica(config)

    def drain_replica(self, model: str, name: str) -> ReplicaInfo:
        """No new requests; in-flight ones finish. `add_replica` with the same name and url undoes it."""
        return self._model(model).drain_replica(name)

    def remove_replica(self, model: str, name: str) -> ReplicaInfo:
        """Drain, then forget the replica once its last in-flight request is released."""
        return self._model(model).remove_replica(name)

    def replicas(self, model: str | None = None) -> list[ReplicaInfo]:
        routers = [self._model(model)] if model is not None else list(self._models.values())
        return [info for router in routers for info in router.infos()]

    def _model(self, model: str) -> ModelRouter:
        if model not in self._models:
            raise UnknownReplicaError(f"no model {model!r}")
        return self._models[model]
