"""The hot path's client for a Redis Cluster: each script call goes to the master that owns its keys' slot.

Why it works with one call per script: every key of admit.lua / settle.lua / heartbeat.lua shares the tenant's
`{t:<tenant>}` hash tag, so a script's keys live in one slot, on one node. The client keeps the slot map (learnt
with CLUSTER SLOTS from the seed nodes or any node it knows) and one pipelined RespClient per node (the endpoint's
transport, credentials and TLS, `RedisEndpoint.at`). Topology changes show up as:

- MOVED slot host:port: the slot has a new owner for good; the call is sent there and the whole map is learnt
  again before the next call (a resharding or failover moves more than one slot);
- ASK slot host:port: the slot is being migrated and this key is already on the target; the call is sent there once,
  right after ASKING, and the map is left as it is;
- a node that cannot be reached, loses its connection or answers CLUSTERDOWN / TRYAGAIN: the call fails as an
  outage (resilient.py decides what that means) and the map is learnt again before the next call, so a replica
  promoted by the cluster is found.

SCRIPT commands (LOAD after NOSCRIPT) go to every master: a script call redirected to another node must find its
script there too.
"""

from __future__ import annotations

import asyncio
from typing import Final

from gateway.store.base import StoreUnavailable
from gateway.store.redis_url import RedisEndpoint
from gateway.store.resp import PreparedCommand, Reply, RespClient, RespError, command_key, encode_command
from gateway.store.slots import SLOTS, key_slot

MAX_REDIRECTS: Final = 5
"""MOVED / ASK hops one call may take: a slot migrating while the map changes takes two; more is a loop."""
_REFRESH_ON: Final = frozenset({"CLUSTERDOWN", "TRYAGAIN"})

Address = tuple[str, int]


class ClusterClient:
    def __init__(self, endpoint: RedisEndpoint, timeout_s: float) -> None:
        self._endpoint = endpoint
        self._timeout_s = timeout_s
        self._slots: list[Address | None] = [None] * SLOTS
        self._nodes: dict[Address, RespClient] = {}
        self._stale = True  # learn the map before the first call
        self._failed: set[Address] = set()  # nodes that failed a call since the last map: asked for it last
        self._refreshing: asyncio.Future[None] | None = None
        self.refreshes = 0
        """Slot maps learnt so far (tests and logs: a MOVED was followed)."""

    async def call(self, *args: object) -> Reply:
        if args and str(args[0]).upper() == "SCRIPT":
            return await self._broadcast(encode_command(args))
        key = command_key(args)
        if key is None:
            raise ValueError(f"{args[0]!r} has no key to route by in a Redis Cluster")
        return await self._send(key_slot(key), encode_command(args))

    async def call_prepared(self, command: PreparedCommand, *args: object) -> Reply:
        return await self._send(command.slot, command.encode(args))

    def close(self) -> None:
        for node in self._nodes.values():
            node.close()
        self._nodes.clear()

    def owner(self, slot: int) -> Address | None:
        """The node the map says owns `slot` (tests)."""
        return self._slots[slot]

    async def _send(self, slot: int, payload: bytes) -> Reply:
        if self._stale:
            await self._refresh()
        address = self._slots[slot]
        if address is None:
            raise StoreUnavailable(f"redis cluster: no node serves slot {slot}")
        asking = False
        for _ in range(MAX_REDIRECTS):
            try:
                return await self._node(address).send(payload, asking)
            except RespError as exc:
                redirect = _redirect(exc, address)
                if redirect is None:
                    if exc.code in _REFRESH_ON:
                        self._stale = True
                    raise
                moved, address = redirect
                asking = not moved
                if moved:  # this slot at once, the rest before the next call
                    self._slots[slot] = address
                    self._stale = True
            except StoreUnavailable:  # the node is down or unreachable (StoreReplyLost included)
                self._failed.add(address)
                self._stale = True
                raise
        raise StoreUnavailable(f"redis cluster: slot {slot} redirected more than {MAX_REDIRECTS} times")

    async def _broadcast(self, payload: bytes) -> Reply:
        if self._stale:
            await self._refresh()
        masters = {address for address in self._slots if address is not None}
        try:
            replies = await asyncio.gather(*(self._node(address).send(payload) for address in masters))
        except StoreUnavailable:
            self._stale = True
            raise
        return replies[0]

    def _node(self, address: Address) -> RespClient:
        node = self._nodes.get(address)
        if node is None:
            node = self._nodes[address] = RespClient(self._endpoint.at(*address), self._timeout_s)
        return node

    async def _refresh(self) -> None:
        """One CLUSTER SLOTS at a time; the callers that arrive meanwhile wait for it."""
        if self._refreshing is not None:
            await asyncio.shield(self._refreshing)
            return
        self._refreshing = asyncio.get_running_loop().create_future()
        try:
            await self._learn_map()
            self._refreshing.set_result(None)
        except BaseException as exc:
            self._refreshing.set_exception(exc)
            self._refreshing.exception()  # mark retrieved: waiters may be none
            raise
        finally:
            self._refreshing = None

    async def _learn_map(self) -> None:
        known = [address for address in dict.fromkeys(self._slots) if address is not None]
        candidates = list(dict.fromkeys([*known, *self._endpoint.seeds]))
        candidates.sort(key=lambda address: address in self._failed)  # a dead node's timeout last, if at all
        errors = []
        for address in candidates:
            try:
                reply = await self._node(address).call("CLUSTER", "SLOTS")
            except (StoreUnavailable, RespError) as exc:
                errors.append(f"{address[0]}:{address[1]}: {exc}")
                continue
            slots: list[Address | None] = [None] * SLOTS
            for start, end, master, *_replicas in reply:
                host = master[0] or address[0]  # an empty host: the one this reply came from
                slots[int(start) : int(end) + 1] = [(host, int(master[1]))] * (int(end) - int(start) + 1)
            self._slots = slots
            self._stale = False
            self._failed.clear()
            self.refreshes += 1
            for gone in set(self._nodes) - set(slots) - set(self._endpoint.seeds):
                self._nodes.pop(gone).close()
            return
        raise StoreUnavailable(f"redis cluster: no node gave its slot map ({'; '.join(errors)})")


def _redirect(exc: RespError, replied: Address) -> tuple[bool, Address] | None:
    """(moved, where) for `MOVED <slot> <host>:<port>` / `ASK <slot> <host>:<port>`; None for any other error."""
    if exc.code not in ("MOVED", "ASK"):
        return None
    host, _, port = str(exc).split(" ")[2].rpartition(":")
    return exc.code == "MOVED", (host or replied[0], int(port))
