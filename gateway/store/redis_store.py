"""The Redis store: Store semantics (base.py) shared by every gateway instance.

Key layout (prefix `sg:` by default). Everything of one tenant shares the hash tag {t:<tenant>}, so both scripts
touch a single Redis Cluster slot:

    sg:keyidx                          HASH  key digest -> tenant id   (the only lookup that precedes the tenant)
    sg:tenants                         SET   tenant ids
    sg:{t:<id>}:tenant                 HASH  limits, policy, models, gen
    sg:{t:<id>}:keys                   SET   key digests
    sg:{t:<id>}:key:<digest>           HASH  key record (revoked, expires_at, per-key limits)
    sg:{t:<id>}:b:<bucket>             HASH  {v: level, t: ms}; bucket = requests | input_tokens | output_tokens
    sg:{t:<id>}:kb:<digest>:<bucket>   HASH  the per-key buckets
    sg:{t:<id>}:inflight               ZSET  request id -> lease end (ms): max_concurrent
    sg:{t:<id>}:owners                 HASH  gateway instance -> heartbeat deadline (ms): its leases' liveness
    sg:{t:<id>}:spent                  HASH  d:<YYYYMMDD> / m:<YYYYMM> -> tokens, cd: / cm: -> micro-dollars (budgets)
    sg:{t:<id>}:usage:<YYYYMMDD>       HASH  requests / input_tokens / output_tokens / cached_input_tokens /
                                             cost_micro_usd, also per model: and key:

On a Redis Cluster the two index keys (keyidx, tenants) live in their own slots, so no command or transaction
names one of them together with a tenant's keys (that would be CROSSSLOT): each index is written by a command of
its own, after the tenant's record (the record is the truth, the index points at it).

Every call is bounded by the socket timeout and never retried here: the caller (resilient.py) decides what an
unavailable Redis means.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from redis.exceptions import RedisError

from gateway.admin.tenants import (
    ApiKey,
    Tenant,
    key_changes_to_hash,
    key_from_hash,
    key_id_of,
    key_to_hash,
    tenant_changes_to_hash,
    tenant_from_hash,
    tenant_to_hash,
)
from gateway.store import base
from gateway.store.base import Admission, AdmitRequest, BucketView, Settlement, StoreRejected, StoreUnavailable
from gateway.store.clock import now_ms
from gateway.store.hot_path import hot_path_client
from gateway.store.redis_pool import PoolExhausted, admin_client
from gateway.store.redis_url import RedisEndpoint, parse_redis_url
from gateway.store.resp import PreparedCommand, RespError

_HERE = Path(__file__).parent


class _Script:
    def __init__(self, filename: str) -> None:
        self.source = (_HERE / filename).read_text()
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()


ADMIT = _Script("admit.lua")
SETTLE = _Script("settle.lua")
# Admin record writes: each one step in Redis, so racing admin writes never undo each other.
ADMIN_CREATE = _Script("admin_create.lua")
ADMIN_UPDATE = _Script("admin_update.lua")
RETIRE_KEY = _Script("retire_key.lua")
HEARTBEAT = _Script("heartbeat.lua")  # lease owners' liveness (leases.py)


@dataclass(frozen=True)
class PoolLimits:
    """redis-py's pool (gateway/store/redis_pool.py): a call waits up to timeout_s for one of max_connections."""

    max_connections: int = 64
    timeout_s: float = 1.0


class RedisStore:
    def __init__(
        self,
        url: str | RedisEndpoint,
        key_prefix: str = "sg:",
        socket_timeout_s: float = 0.1,
        pool: PoolLimits = PoolLimits(),
        heartbeat_s: float = 10.0,
    ) -> None:
        endpoint = parse_redis_url(url) if isinstance(url, str) else url
        # Both clients from one endpoint: the same transport (TCP, TLS, unix socket), credentials and db.
        self._redis = admin_client(endpoint, socket_timeout_s, pool.max_connections, pool.timeout_s)
        # the hot-path scripts (one server, a cluster's slot owners, or Sentinel's master); redis-py for the rest
        self._fast = hot_path_client(endpoint, socket_timeout_s)
        self._p = key_prefix
        # The most one redis-py call may take: a wait for a pooled connection, then connect, one retry and the reply.
        # Every socket operation is bounded on its own, but redis-py's Sentinel discovery can loop past them (a TLS
        # client at a plaintext sentinel waited for its handshake for a minute).
        self._call_timeout_s = pool.timeout_s + 3 * socket_timeout_s
        self.heartbeat_s = heartbeat_s
        """How long a dead gateway's leases outlive it (leases.py); 0: until their lease ends."""
        self._lease_ms = 0  # the longest lease admitted: how long an owner's heartbeat must be kept
        self._admit_commands: dict[tuple[str, str], PreparedCommand] = {}  # (tenant, digest) -> EVALSHA + KEYS
        self._settle_commands: dict[tuple[str, str, str], PreparedCommand] = {}  # (tenant, digest, day) -> ...
        # redis-py's scripts: EVALSHA, loading the source again on NOSCRIPT (admin calls, not the hot path)
        self._admin_create = self._redis.register_script(ADMIN_CREATE.source)
        self._admin_update = self._redis.register_script(ADMIN_UPDATE.source)
        self._retire_key = self._redis.register_script(RETIRE_KEY.source)

    async def start(self) -> None:
        await self._call(self._redis.script_load, ADMIT.source)
        await self._call(self._redis.script_load, SETTLE.source)

    async def close(self) -> None:
        self._fast.close()
        await self._redis.aclose()

    async def _call(self, fn: Callable[..., Any], *args: object) -> Any:
        """`fn` is a redis-py command, pipeline or script: its reply's type is the command's (redis-py types
        them loosely, sync and async together)."""
        try:
            async with asyncio.timeout(self._call_timeout_s):
                return await fn(*args)
        except PoolExhausted:
            raise
        except (RedisError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(f"redis: {exc!r}") from exc

    async def _script(self, script: _Script, command: PreparedCommand, args: list[object]) -> list[Any]:
        """Both hot-path scripts return an array."""
        try:
            return cast(list[Any], await self._fast.call_prepared(command, *args))
        except RespError as exc:
            if exc.code != "NOSCRIPT":
                raise _refused(exc) from exc
        # Redis restarted or was flushed: load the script again (EVALSHA, reload on NOSCRIPT).
        try:
            await self._fast.call("SCRIPT", "LOAD", script.source)
            return cast(list[Any], await self._fast.call_prepared(command, *args))
        except RespError as exc:
            raise _refused(exc) from exc

    # ---- key names ----------------------------------------------------------------------------------------------
    def _t(self, tenant_id: str) -> str:
        return f"{self._p}{{t:{tenant_id}}}:"

    def _admit_command(self, tenant_id: str, digest: str) -> PreparedCommand:
        command = self._admit_commands.get((tenant_id, digest))
        if command is None:
            t = self._t(tenant_id)
            keys = [t + "tenant", t + "key:" + digest]
            keys += [t + "b:" + b for b in base.BUCKETS] + [f"{t}kb:{digest}:{b}" for b in base.BUCKETS]
            keys += [t + "inflight", t + "spent", t + "owners"]
            if len(self._admit_commands) > 100_000:
                self._admit_commands.clear()
            command = PreparedCommand("EVALSHA", ADMIT.sha, len(keys), *keys)
            self._admit_commands[(tenant_id, digest)] = command
        return command

    # ---- request path -------------------------------------------------------------------------------------------
    async def get_key(self, digest: str) -> ApiKey | None:
        tenant_id = await self._call(self._redis.hget, self._p + "keyidx", digest)
        if tenant_id is None:
            return None
        raw = await self._call(self._redis.hgetall, self._t(tenant_id) + "key:" + digest)
        return key_from_hash(raw) if raw else None

    async def get_tenant(self, tenant_id: str) -> Tenant | None:
        raw = await self._call(self._redis.hgetall, self._t(tenant_id) + "tenant")
        return tenant_from_hash(raw) if raw else None

    async def admit(self, request: AdmitRequest) -> Admission:
        command = self._admit_command(request.tenant_id, request.digest)
        reserve = -1 if request.max_tokens is None else request.max_tokens
        args: list[object] = [
            request.model,
            request.prompt_tokens,
            reserve,
            request.request_id,
            int(request.lease_s * 1000),
            request.completions,
            request.reserved_cost_micro_usd,
            int(self.heartbeat_s * 1000),
        ]
        self._lease_ms = max(self._lease_ms, int(request.lease_s * 1000))
        out = await self._script(ADMIT, command, args)
        admission = Admission(out[0], out[1] / 1000, int(out[2]), int(out[3]), out[4], out[5])
        admission.reserved_cost_micro_usd = request.reserved_cost_micro_usd
        for i, name in enumerate(base.BUCKETS):
            limit, remaining, reset_ms = out[6 + 3 * i : 9 + 3 * i] or (0, 0, 0)
            if limit:
                admission.buckets[name] = BucketView(int(limit), int(remaining), int(reset_ms) / 1000)
        for i, name in enumerate(base.HEADROOM):
            limit, left = out[15 + 2 * i : 17 + 2 * i] or (0, 0)
            if limit:
                admission.headroom[name] = (int(limit), int(left))
        return admission

    async def settle(self, s: Settlement) -> None:
        args: list[object] = [
            s.request_id,
            s.reserved_in,
            s.reserved_out,
            s.actual_in,
            s.actual_out,
            s.day,
            s.month,
            s.model,
            key_id_of(s.digest),
            int(s.replay),
            s.kind,
            s.lease_end_ms,
            s.cached_in,
            s.reserved_cost_micro_usd,
            s.cost_micro_usd,
            s.tenant_created_ms,
        ]
        await self._script(SETTLE, self._settle_command(s.tenant_id, s.digest, s.day), args)

    def _settle_command(self, tenant_id: str, digest: str, day: str) -> PreparedCommand:
        command = self._settle_commands.get((tenant_id, digest, day))
        if command is None:
            t = self._t(tenant_id)
            keys = [
                t + "tenant",
                t + "key:" + digest,
                t + "b:input_tokens",
                t + "b:output_tokens",
                f"{t}kb:{digest}:input_tokens",
                f"{t}kb:{digest}:output_tokens",
                t + "inflight",
                t + "spent",
                t + "usage:" + day,
                t + "b:requests",
                f"{t}kb:{digest}:requests",
                t + "recorded",
            ]
            if len(self._settle_commands) > 100_000:
                self._settle_commands.clear()
            command = PreparedCommand("EVALSHA", SETTLE.sha, len(keys), *keys)
            self._settle_commands[(tenant_id, digest, day)] = command
        return command

    async def heartbeat(self, tenant_id: str, owner: str) -> None:
        """Renew a gateway instance's lease deadline in one tenant (leases.py)."""
        command = PreparedCommand("EVALSHA", HEARTBEAT.sha, 1, self._t(tenant_id) + "owners")
        heartbeat_ms = int(self.heartbeat_s * 1000)
        await self._script(HEARTBEAT, command, [owner, heartbeat_ms, max(heartbeat_ms, self._lease_ms)])

    # ---- admin --------------------------------------------------------------------------------------------------
    async def put_tenant(self, tenant: Tenant) -> Tenant:
        t = self._t(tenant.id)
        fields = tenant_to_hash(tenant)
        del fields["gen"], fields["created_ms"]
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(t + "tenant", mapping=fields)  # type: ignore[arg-type]  # redis stubs: Mapping's key is invariant
            pipe.hsetnx(t + "tenant", "created_ms", now_ms())  # a new record's stamp, kept after
            pipe.hincrby(t + "tenant", "gen", 1)
            pipe.hget(t + "tenant", "created_ms")
            _, _, gen, created_ms = await self._call(pipe.execute)
        await self._call(self._redis.sadd, self._p + "tenants", tenant.id)  # its own slot on a cluster
        tenant.gen, tenant.created_ms = int(gen), int(created_ms)
        return tenant

    async def delete_tenant(self, tenant_id: str) -> bool:
        t = self._t(tenant_id)
        existed = await self._call(self._redis.srem, self._p + "tenants", tenant_id)
        digests = await self._call(self._redis.smembers, t + "keys")
        if digests:
            await self._call(self._redis.hdel, self._p + "keyidx", *digests)
        try:
            names = [name async for name in self._redis.scan_iter(match=_glob_escape(t) + "*", count=500)]
        except (RedisError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(f"redis: {exc!r}") from exc
        if names:
            await self._call(self._redis.delete, *names)
        return bool(existed) or bool(names)

    async def list_tenants(self) -> list[Tenant]:
        ids = sorted(await self._call(self._redis.smembers, self._p + "tenants"))
        # one round trip for all of them: a thousand tenants one by one took ~1.6 s (the console's tenant list)
        async with self._redis.pipeline(transaction=False) as pipe:
            for tenant_id in ids:
                pipe.hgetall(self._t(tenant_id) + "tenant")
            raws = await self._call(pipe.execute)
        return [tenant_from_hash(raw) for raw in raws if raw]

    async def create_tenant(self, tenant: Tenant) -> Tenant | None:
        fields = tenant_to_hash(tenant)
        del fields["gen"], fields["created_ms"]
        created = await self._call(self._admin_create, [self._t(tenant.id) + "tenant"], _flat(fields))
        if not created:
            return None
        await self._call(self._redis.sadd, self._p + "tenants", tenant.id)  # the index; the record is the truth
        tenant.gen, tenant.created_ms = int(created[0]), int(created[1])
        return tenant

    async def update_tenant(self, tenant_id: str, changes: dict[str, object]) -> Tenant | None:
        args = ["gen", *_flat(tenant_changes_to_hash(changes))]
        raw = await self._call(self._admin_update, [self._t(tenant_id) + "tenant"], args)
        return tenant_from_hash(_pairs(raw)) if raw else None

    async def update_key(self, tenant_id: str, digest: str, changes: dict[str, object]) -> ApiKey | None:
        args = ["", *_flat(key_changes_to_hash(changes))]
        raw = await self._call(self._admin_update, [self._t(tenant_id) + "key:" + digest], args)
        return key_from_hash(_pairs(raw)) if raw else None

    async def retire_key(self, tenant_id: str, digest: str, grace_s: float) -> tuple[str, ApiKey | None]:
        out = await self._call(self._retire_key, [self._t(tenant_id) + "key:" + digest], [int(grace_s * 1000)])
        return out[0], key_from_hash(_pairs(out[1:])) if len(out) > 1 else None

    async def delete_key(self, tenant_id: str, digest: str) -> bool:
        t = self._t(tenant_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(t + "key:" + digest, *(f"{t}kb:{digest}:{b}" for b in base.BUCKETS))
            pipe.srem(t + "keys", digest)
            deleted, _ = await self._call(pipe.execute)
        await self._call(self._redis.hdel, self._p + "keyidx", digest)  # its own slot on a cluster
        return bool(deleted)

    async def put_key(self, key: ApiKey) -> None:
        t = self._t(key.tenant_id)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hset(t + "key:" + key.digest, mapping=key_to_hash(key))  # type: ignore[arg-type]  # as in put_tenant
            pipe.sadd(t + "keys", key.digest)
            pipe.hset(self._p + "keyidx", key.digest, key.tenant_id)
            await self._call(pipe.execute)

    async def list_keys(self, tenant_id: str) -> list[ApiKey]:
        t = self._t(tenant_id)
        digests = sorted(await self._call(self._redis.smembers, t + "keys"))
        async with self._redis.pipeline(transaction=False) as pipe:
            for digest in digests:
                pipe.hgetall(t + "key:" + digest)
            raws = await self._call(pipe.execute)
        return sorted((key_from_hash(r) for r in raws if r), key=lambda k: k.created_at)

    async def usage(self, tenant_id: str, days: list[str]) -> dict[str, dict[str, int]]:
        t = self._t(tenant_id)
        out: dict[str, dict[str, int]] = {}
        for day in days:
            raw = await self._call(self._redis.hgetall, t + "usage:" + day)
            if raw:
                out[day] = {k: int(v) for k, v in raw.items()}
        return out


def _refused(exc: RespError) -> Exception:
    """LOADING, BUSY, READONLY ... (resp.OUTAGE_REPLIES): Redis will run it later, so an outage (the settlement
    waits and is replayed, admission follows failure_mode); any other error reply would fail the same way again."""
    if exc.is_outage:
        return StoreUnavailable(f"redis: {exc}")
    return StoreRejected(f"redis: {exc}")


def _flat(fields: dict[str, str]) -> list[str]:
    return [item for pair in fields.items() for item in pair]


def _pairs(flat: list[str]) -> dict[str, str]:
    """HGETALL's flat list, as a script returns it, back to a dict."""
    return dict(zip(flat[::2], flat[1::2]))


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
