"""`DiscoveryManager`: the discovery loops of every model that has a `discovery:` section, started and stopped with
the gateway (gateway/runtime.py)."""

from __future__ import annotations

import asyncio

from gateway.routing.base import ReplicaAdmin, Router
from gateway.routing.discovery.config import DiscoveryConfig
from gateway.routing.discovery.dns import DnsSource
from gateway.routing.discovery.kubernetes import EndpointSliceSource
from gateway.routing.discovery.loop import DiscoveryLoop
from gateway.routing.discovery.source import DiscoverySource


def build_source(config: DiscoveryConfig) -> DiscoverySource:
    if config.kubernetes is not None:
        return EndpointSliceSource(config)
    return DnsSource(config)


class DiscoveryManager:
    def __init__(self, loops: list[DiscoveryLoop]) -> None:
        self.loops = {loop.model: loop for loop in loops}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for loop in self.loops.values():
            await loop.tick()  # the pool is filled before the gateway takes its first request
            self._tasks.append(asyncio.create_task(loop.run(), name=f"discovery:{loop.model}"))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for loop in self.loops.values():
            await loop.source.close()


def build_discovery(configs: dict[str, DiscoveryConfig], router: Router) -> DiscoveryManager:
    """One loop per model with discovery; ValueError (the CLI's exit 2) names what cannot work."""
    if not configs:
        return DiscoveryManager([])
    if not isinstance(router, ReplicaAdmin):
        raise ValueError(
            f"models {sorted(configs)} use discovery, which needs a router that manages replica pools: "
            "set router: gateway.routing.factory:build_router"
        )
    return DiscoveryManager(
        [
            DiscoveryLoop(model, build_source(config), router, config.interval_s, config.kv_events, config.role)
            for model, config in configs.items()
        ]
    )
