"""Round robin over each model's configured replica URLs: the gateway's default Router (gateway/routing/base.py).

Holds no health state: a replica that fails before the first byte is excluded by the request path's single retry.
The prefix-affinity router replaces it through the `router:` setting of config/gateway.yaml. It serves every request
whole, so it refuses a pool with prefill replicas (disaggregated serving needs the prefix router).
"""

from __future__ import annotations

from typing import Any

from gateway.config import ROUTING_KEYS
from gateway.routing.base import NoHealthyReplicaError, Role, Route, RouteRequest


class RoundRobinRouter:
    def __init__(self, replicas_by_model: dict[str, list[tuple[str, str]]]):
        self._replicas = {model: list(replicas) for model, replicas in replicas_by_model.items()}
        self._next = {model: 0 for model in replicas_by_model}

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def models(self) -> list[str]:
        return [model for model, replicas in self._replicas.items() if replicas]

    def disaggregated(self, model: str) -> bool:
        return False  # build_router refuses prefill replicas

    def route(self, request: RouteRequest, exclude: frozenset[str] = frozenset()) -> Route:
        replicas = self._replicas.get(request.model) or []
        for _ in range(len(replicas)):
            i = self._next[request.model]
            self._next[request.model] = (i + 1) % len(replicas)
            name, url = replicas[i]
            if name not in exclude:
                return Route(replica=name, url=url, policy="round_robin")
        raise NoHealthyReplicaError(request.model)

    def first_token(self, route: Route) -> None:
        pass  # round robin keeps no load estimate

    def release(self, route: Route, outcome: str) -> None:
        pass


def build_router(routing_models: dict[str, Any], *, metrics_registry: object = None) -> RoundRobinRouter:
    """The factory signature config.py documents; routing knobs other than `replicas` do not apply here, so a model
    that sets them is refused (ValueError) rather than served without them, typos included. A replica of role
    `decode` serves whole requests here like any other; a `prefill` one is refused too."""
    for model, spec in routing_models.items():
        knobs = [key for key in ROUTING_KEYS if spec.get(key) is not None]
        if knobs:
            raise ValueError(
                f"models.{model}.{knobs[0]}: the round-robin router has no {knobs[0]} settings; they are the prefix "
                "router's: router: gateway.routing.factory:build_router"
            )
        for i, replica in enumerate(spec["replicas"]):
            if replica.get("role") == Role.PREFILL:
                raise ValueError(
                    f"models.{model}.replicas[{i}].role=prefill: disaggregated prefill and decode needs "
                    "router: gateway.routing.factory:build_router"
                )
    return RoundRobinRouter(
        {model: [(r["name"], r["url"]) for r in spec["replicas"]] for model, spec in routing_models.items()}
    )
