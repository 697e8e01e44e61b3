"""The hot path's Redis client for the endpoint's topology: one server, a Redis Cluster, or a Sentinel-run master.

Why a protocol: redis_store.py sends its scripts the same way to all three (EVALSHA, SCRIPT LOAD after NOSCRIPT);
only where a call goes differs, and that is each client's business (resp.py, cluster.py, sentinel.py).
"""

from __future__ import annotations

from typing import Protocol

from gateway.store.cluster import ClusterClient
from gateway.store.redis_url import RedisEndpoint, Topology
from gateway.store.resp import PreparedCommand, Reply, RespClient
from gateway.store.sentinel import SentinelClient


class HotPathClient(Protocol):
    async def call(self, *args: object) -> Reply: ...

    async def call_prepared(self, command: PreparedCommand, *args: object) -> Reply: ...

    def close(self) -> None: ...


def hot_path_client(endpoint: RedisEndpoint, timeout_s: float) -> HotPathClient:
    if endpoint.topology is Topology.CLUSTER:
        return ClusterClient(endpoint, timeout_s)
    if endpoint.topology is Topology.SENTINEL:
        return SentinelClient(endpoint, timeout_s)
    return RespClient(endpoint, timeout_s)
