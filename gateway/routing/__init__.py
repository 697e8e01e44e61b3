"""Choosing a replica for each request. The gateway's request path sees only `Router` (base.py).

`build_router` (factory.py) makes the prefix-affinity router from the gateway config; its admin operations
(`add_replica`, `drain_replica`, `remove_replica`, `replicas`) live on `PrefixRouter` (router.py).
"""

from gateway.routing.base import (
    NoHealthyReplicaError,
    ReplicaAdmin,
    ReplicaInfo,
    Route,
    Router,
    RouteRequest,
)
from gateway.routing.config import RoutingConfigError
from gateway.routing.factory import build_router
from gateway.routing.model_router import UnknownReplicaError
from gateway.routing.router import PrefixRouter

__all__ = [
    "NoHealthyReplicaError",
    "PrefixRouter",
    "ReplicaAdmin",
    "ReplicaInfo",
    "Route",
    "RouteRequest",
    "Router",
    "RoutingConfigError",
    "UnknownReplicaError",
    "build_router",
]
