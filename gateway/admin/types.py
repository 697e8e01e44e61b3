"""What the admin API reads of the running gateway: a Protocol, so admin code names its needs (runtime.Gateway is
the one implementation; tests may pass another)."""

from __future__ import annotations

from typing import Protocol

from gateway.config import GatewayConfig
from gateway.request.hooks import RequestHooks
from gateway.routing.base import Router
from gateway.store.local import LocalStore
from gateway.store.resilient import ResilientStore


class AdminGateway(Protocol):
    @property
    def config(self) -> GatewayConfig: ...

    @property
    def store(self) -> LocalStore | ResilientStore: ...

    @property
    def hooks(self) -> RequestHooks: ...

    @property
    def router(self) -> Router: ...

    def admin_changed(self, tenant_id: str) -> None:
        """A tenant or one of its keys changed: drop what this process caches of it."""
