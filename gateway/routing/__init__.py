"""Choosing a replica for each request. The gateway's request path sees only `Router` (base.py)."""

from gateway.routing.base import NoHealthyReplicaError, Route, RouteRequest, Router

__all__ = ["NoHealthyReplicaError", "Route", "RouteRequest", "Router"]
