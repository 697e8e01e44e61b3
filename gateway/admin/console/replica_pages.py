"""Replica pools per model: health, breaker, load, and the gateway's prefix hit rate; add, drain and remove at run
time through the same router calls and checks as the JSON API (replicas.py). Pools are per gateway process, as the
API's are: a change here applies to this gateway."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from starlette.responses import Response

from gateway.admin.console.page import Page, redirect
from gateway.admin.replicas import applied, check_changeable, new_replica, replica_args
from gateway.errors import ApiError
from gateway.routing.base import ReplicaAdmin, ReplicaInfo, Role

_PROMPT_TOKENS = "sluicegate_routing_prompt_tokens_total"
_MATCHED_TOKENS = "sluicegate_routing_matched_prefix_tokens_total"
_DECISIONS = "sluicegate_routing_decisions_total"


@dataclass
class ModelPool:
    model: str
    replicas: list[ReplicaInfo]
    prompt_tokens: float = 0.0
    matched_tokens: dict[str, float] = field(default_factory=dict)
    """Replica -> prompt tokens it was believed to hold when chosen."""
    routed: dict[str, float] = field(default_factory=dict)
    """Replica -> requests routed to it."""

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens routed to a replica that held them, over all prompt tokens routed."""
        return sum(self.matched_tokens.values()) / self.prompt_tokens if self.prompt_tokens else 0.0


def _routing_counts(registry: CollectorRegistry, pools: dict[str, ModelPool]) -> None:
    """The router's counters from this gateway's registry (what /metrics shows), summed per model and replica."""
    for family in registry.collect():
        for sample in family.samples:
            pool = pools.get(sample.labels.get("model", ""))
            if pool is None:
                continue
            replica = sample.labels.get("replica", "")
            if sample.name == _PROMPT_TOKENS:
                pool.prompt_tokens += sample.value
            elif sample.name == _MATCHED_TOKENS:
                pool.matched_tokens[replica] = pool.matched_tokens.get(replica, 0.0) + sample.value
            elif sample.name == _DECISIONS:
                pool.routed[replica] = pool.routed.get(replica, 0.0) + sample.value


def _router(page: Page) -> ReplicaAdmin:
    router = page.gw.router
    if not isinstance(router, ReplicaAdmin):
        raise ApiError(404, "This gateway's router does not manage replica pools.", code="not_supported")
    return router


async def list_replicas(page: Page) -> Response:
    router = page.gw.router
    managed = isinstance(router, ReplicaAdmin)
    pools = {
        model: ModelPool(model, router.replicas(model) if isinstance(router, ReplicaAdmin) else [])
        for model in sorted(page.gw.config.models)
    }
    _routing_counts(page.gw.metrics.registry, pools)
    return page.render("replicas.html", pools=list(pools.values()), managed=managed, workers=page.gw.config.workers)


def _model(page: Page) -> str:
    model = page.form.get("model", "")
    if model not in page.gw.config.models:
        raise ApiError(404, f"The gateway serves no model {model!r}.", code="model_not_found")
    return model


async def add_replica(page: Page) -> Response:
    router, model = _router(page), _model(page)
    check_changeable(page.gw)
    body = {
        "name": page.form.get("name", "").strip(),
        "url": page.form.get("url", "").strip(),
        "kv_events": "kv_events" in page.form,
        "role": page.form.get("role", Role.BOTH),
    }
    applied(router.add_replica, model, *replica_args(new_replica(body)))
    return redirect("/replicas", "added")


async def drain_replica(page: Page) -> Response:
    router, model = _router(page), _model(page)
    check_changeable(page.gw)
    applied(router.drain_replica, model, page.form.get("name", ""))
    return redirect("/replicas", "drained")


async def remove_replica(page: Page) -> Response:
    router, model = _router(page), _model(page)
    check_changeable(page.gw)
    applied(router.remove_replica, model, page.form.get("name", ""))
    return redirect("/replicas", "removed")
