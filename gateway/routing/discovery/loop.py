"""One discovery loop (a model's `discovery:` entry): look up its replicas every `interval_s`, apply the difference
to the router.

The loop owns the replicas it added (a static replica of the config or one the admin API added is never touched),
and drives the same operations as the admin API (gateway/admin/replicas.py): `add_replica` for an endpoint that
appeared, `remove_replica` for one that went away -- it stops taking requests at once and is forgotten when its last
in-flight request ends, so a replica leaving never cuts a request. An endpoint whose name stays but whose URL
changed (a StatefulSet Pod rescheduled with a new IP) is removed, and added back under the new URL once the old one
is gone. A failed look-up changes nothing and is logged once per kind of failure (and its recovery once).

A model with several entries (a disaggregated model's prefill and decode pools) has a loop per entry, each owning
what it added under its own `prefix` (config.py, `name_prefixes`), so one pool's changes never touch the other's.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.routing.base import ReplicaAdmin, ReplicaInfo, Role
from gateway.routing.discovery.source import DiscoveryError, DiscoverySource, Endpoint
from gateway.routing.model_router import UnknownReplicaError
from gateway.routing.replica import REMOVING

logger = logging.getLogger(__name__)


class DiscoveryLoop:
    def __init__(
        self,
        model: str,
        source: DiscoverySource,
        admin: ReplicaAdmin,
        interval_s: float,
        kv_events: bool = True,
        role: Role = Role.BOTH,
        prefix: str = "",
    ) -> None:
        self.model = model
        self.source = source
        self.admin = admin
        self.interval_s = interval_s
        self.kv_events = kv_events
        self.role = role
        self.prefix = prefix
        """Put before each name found (`<prefix>-<name>`); "" for none."""
        self.what = f"model {model!r}" + (f" ({prefix} pool)" if prefix else "")
        """How the logs name this loop."""
        self.owned: dict[str, str] = {}
        """Replica name -> URL of the replicas this loop added and has not removed."""
        self.last_error: str | None = None
        """Why the latest look-up failed; None after one that answered."""
        self.lookups = 0
        """Look-ups that answered."""
        self._conflicts: set[str] = set()

    async def run(self) -> None:
        """Look-ups until cancelled; the first is `tick`ed by the caller (DiscoveryManager.start)."""
        while True:
            await asyncio.sleep(self.interval_s)
            await self.tick()

    async def tick(self) -> None:
        """One look-up and its changes; never raises but for cancellation."""
        try:
            found = await self.source.resolve()
        except DiscoveryError as exc:
            self._failed(str(exc))
            return
        except Exception as exc:  # a bug or an unexpected reply must not end discovery for good
            logger.exception("discovery for %s failed unexpectedly", self.what)
            self._failed(repr(exc))
            return
        if self.last_error is not None:
            logger.warning("discovery for %s answers again: %d replica(s)", self.what, len(found))
        self.last_error = None
        self.lookups += 1
        self.apply(found)

    def apply(self, found: frozenset[Endpoint]) -> None:
        wanted = {self._name(endpoint): endpoint.url for endpoint in found}
        present = self._present()
        for name, url in list(self.owned.items()):
            if wanted.get(name) != url:
                self._remove(name, present)
        present = self._present()  # a removed replica without requests in flight is gone already
        for name, url in sorted(wanted.items()):
            info = present.get(name)
            if info is not None and info.state != REMOVING:
                if name not in self.owned and name not in self._conflicts:
                    self._conflicts.add(name)  # said once: the name stays taken until the config changes
                    logger.warning(
                        "discovery: model %r already has a replica %s (%s) it did not add; %s is not added",
                        self.model,
                        name,
                        info.url,
                        url,
                    )
                continue
            self._add(name, url)

    def _name(self, endpoint: Endpoint) -> str:
        return f"{self.prefix}-{endpoint.name}" if self.prefix else endpoint.name

    def _present(self) -> dict[str, ReplicaInfo]:
        try:
            return {info.name: info for info in self.admin.replicas(self.model)}
        except UnknownReplicaError:  # the router has not seen the model yet: add_replica creates it
            return {}

    def _remove(self, name: str, present: dict[str, ReplicaInfo]) -> None:
        del self.owned[name]
        info = present.get(name)
        if info is None or info.state == REMOVING:
            return  # gone already (the admin API removed it), or leaving
        self.admin.remove_replica(self.model, name)
        logger.info("discovery: replica %s (%s) of model %r left; draining it", name, info.url, self.model)

    def _add(self, name: str, url: str) -> None:
        try:
            self.admin.add_replica(self.model, name, url, self.kv_events, self.role)
        except ValueError as exc:
            # This loop's own replica of an old URL is still finishing its requests: added on a later look-up.
            logger.debug("discovery: replica %s of model %r not added yet: %s", name, self.model, exc)
            return
        self.owned[name] = url
        logger.info("discovery: replica %s (%s) of model %r joined", name, url, self.model)

    def _failed(self, error: str) -> None:
        if error != self.last_error:
            logger.warning("discovery for %s failed, keeping its %d replica(s): %s", self.what, len(self.owned), error)
        self.last_error = error
