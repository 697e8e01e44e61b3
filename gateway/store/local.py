"""The in-process store behind the request path's interface, for a gateway without REDIS_URL: never unavailable."""

from __future__ import annotations

from gateway.admin.tenants import ApiKey, Tenant
from gateway.store.base import Admission, AdmitRequest, Settlement
from gateway.store.memory import MemoryStore


class LocalStore(MemoryStore):
    """MemoryStore with ResilientStore's request-path signatures."""

    redis_up = None
    """No Redis behind this store (/health reports "none")."""

    async def admit(self, request: AdmitRequest, tenant: Tenant | None = None, key: ApiKey | None = None) -> Admission:
        admission = await super().admit(request)
        admission.store = self
        return admission

    async def settle(self, settlement: Settlement, store: object = None) -> None:
        await super().settle(settlement)
