"""What the console reads of the running gateway beyond the admin API's needs: the refusal ring and the metrics
registry the router counts prefix hits in (runtime.Gateway provides both)."""

from __future__ import annotations

from typing import Protocol

from gateway.admin.types import AdminGateway
from gateway.metrics import GatewayMetrics
from gateway.request.proxy import EndpointParts


class ConsoleGateway(AdminGateway, Protocol):
    @property
    def endpoint_parts(self) -> EndpointParts: ...

    @property
    def metrics(self) -> GatewayMetrics: ...
