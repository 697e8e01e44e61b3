"""`DiscoveryManager`: the discovery loops of every model that has a `discovery:` section (a loop per entry), started
and stopped with the gateway (gateway/runtime.py)."""

from __future__ import annotations

import asyncio

from gateway.routing.base import ReplicaAdmin, Router
from gateway.routing.discovery.config import DiscoveryConfig, name_prefixes
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
        self.loops = loops
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for loop in self.loops:
            await loop.tick()  # the pool is filled before the gateway takes its first request
            name = f"discovery:{loop.model}" + (f":{loop.prefix}" if loop.prefix else "")
            self._tasks.append(asyncio.create_task(loop.run(), name=name))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for loop in self.loops:
            await loop.source.close()


def build_discovery(configs: dict[str, list[DiscoveryConfig]], router: Router) -> DiscoveryManager:
    """One loop per discovery entry of each model (GatewayConfig.discovery_models); ValueError (the CLI's exit 2)
    names what cannot work."""
    if not configs:
        return DiscoveryManager([])
    if not isinstance(router, ReplicaAdmin):
        raise ValueError(
            f"models {sorted(configs)} use discovery, which needs a router that manages replica pools: "
            "set router: gateway.routing.factory:build_router"
        )
    return DiscoveryManager(
        [
            DiscoveryLoop(model, build_source(entry), router, entry.interval_s, entry.kv_events, entry.role, prefix)
            for model, entries in configs.items()
            for entry, prefix in zip(entries, name_prefixes(entries), strict=True)
        ]
    )
