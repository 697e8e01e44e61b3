"""redis-py's client for everything but the two hot-path scripts (key and tenant reads, admin writes), built from
the same RedisEndpoint as the hot path's RespClient so both speak the same transport.

Why a waiting pool: redis-py's default pool raises MaxConnectionsError the moment its connections are all in use,
which a cold worker meets under its first burst of key lookups; taken for an outage, it sent every worker into
fail-open or 503s. Here a call waits (at most `pool_timeout_s`) for a connection, and a wait that runs out raises
PoolExhausted: this gateway is overloaded, Redis is not down, so the failure policy leaves Redis marked up.

A Redis Cluster gets redis-py's RedisCluster (it follows MOVED / ASK and keeps `max_connections` per node), a
Sentinel-run master redis-py's Sentinel (it asks the sentinels again when the master fails or turns read-only).
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import (
    AbstractConnection,
    BlockingConnectionPool,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.store.base import StoreUnavailable
from gateway.store.redis_url import RedisEndpoint, Topology

AdminClient = aioredis.Redis | RedisCluster


class PoolExhausted(StoreUnavailable):
    """Every pooled connection stayed busy for the pool's whole wait: this call fails, Redis is not down."""


class _WaitingPool(BlockingConnectionPool):
    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]  # redis-py's
        except RedisConnectionError as exc:
            # The pool's own wait ran out (asyncio's timeout is the cause); a failed connect has an OSError there.
            if isinstance(exc.__cause__, asyncio.TimeoutError):
                raise PoolExhausted(f"redis: no pooled connection free within {self.timeout}s") from exc
            raise


def admin_client(
    endpoint: RedisEndpoint, socket_timeout_s: float, max_connections: int, pool_timeout_s: float
) -> AdminClient:
    options: dict[str, Any] = dict(
        db=endpoint.db,
        username=endpoint.username,
        password=endpoint.password,
        decode_responses=True,
        socket_timeout=socket_timeout_s,
        # One retry on a dropped connection only (a pooled one Redis closed when it restarted); a timeout is
        # not retried, so every call stays bounded by about one socket timeout.
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    )
    if endpoint.topology is Topology.CLUSTER:
        return _cluster_client(endpoint, socket_timeout_s, max_connections, options)
    if endpoint.topology is Topology.SENTINEL:
        return _sentinel_client(endpoint, socket_timeout_s, max_connections, options)
    connection_class: type[AbstractConnection]
    if endpoint.unix_path:
        connection_class = UnixDomainSocketConnection
        options.update(path=endpoint.unix_path, socket_connect_timeout=socket_timeout_s)
    else:
        connection_class = Connection
        options.update(host=endpoint.host, port=endpoint.port, socket_connect_timeout=socket_timeout_s)
        if endpoint.tls is not None:
            connection_class = SSLConnection
            options.update(
                ssl_ca_certs=endpoint.tls.ca_file,
                ssl_certfile=endpoint.tls.cert_file,
                ssl_keyfile=endpoint.tls.key_file,
                ssl_cert_reqs=endpoint.tls.cert_reqs,
                ssl_check_hostname=endpoint.tls.cert_reqs == "required",
            )
    pool = _WaitingPool(
        max_connections=max_connections, timeout=pool_timeout_s, connection_class=connection_class, **options
    )
    return aioredis.Redis.from_pool(pool)


def _tls_options(endpoint: RedisEndpoint) -> dict[str, Any]:
    if endpoint.tls is None:
        return {}
    return dict(
        ssl=True,
        ssl_ca_certs=endpoint.tls.ca_file,
        ssl_certfile=endpoint.tls.cert_file,
        ssl_keyfile=endpoint.tls.key_file,
        ssl_cert_reqs=endpoint.tls.cert_reqs,
        ssl_check_hostname=endpoint.tls.cert_reqs == "required",
    )


def _cluster_client(
    endpoint: RedisEndpoint, socket_timeout_s: float, max_connections: int, options: dict[str, Any]
) -> RedisCluster:
    options = {k: v for k, v in options.items() if k != "db"}  # a cluster has db 0 only (the URL parser checks)
    return RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in endpoint.seeds],
        max_connections=max_connections,  # per node
        socket_connect_timeout=socket_timeout_s,
        **options,
        **_tls_options(endpoint),
    )


def _sentinel_client(
    endpoint: RedisEndpoint, socket_timeout_s: float, max_connections: int, options: dict[str, Any]
) -> aioredis.Redis:
    assert endpoint.master_name is not None  # the URL parser requires it
    timeouts = dict(socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s)
    # the sentinels without the master's credentials (sentinel.py asks them the same way)
    # redis-py annotated Sentinel's constructor in 8.x; before, it was untyped (both versions satisfy redis>=5.0)
    sentinel = Sentinel(  # type: ignore[no-untyped-call,unused-ignore]
        list(endpoint.seeds), sentinel_kwargs={**timeouts, **_tls_options(endpoint)}
    )
    master: aioredis.Redis = sentinel.master_for(
        endpoint.master_name,
        max_connections=max_connections,
        socket_connect_timeout=socket_timeout_s,
        **options,
        **_tls_options(endpoint),
    )
    return master
