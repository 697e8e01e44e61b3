"""Replicas from the Kubernetes EndpointSlice API: the ready endpoints of one Service, polled.

In a cluster the gateway's Pod has what the call needs: the API server's address in KUBERNETES_SERVICE_HOST/PORT,
and a service-account token and CA under /var/run/secrets/kubernetes.io/serviceaccount (the chart's Role grants
`list` on endpointslices). One list call per interval: a watch would see a change sooner, but the pool changes at
the pace of Pods starting (minutes of model loading), and a list that fails leaves nothing to resume.

An endpoint counts while its `ready` condition is true or unset (the API's rule: unset means ready). A terminating
Pod turns unready, so it leaves the pool and drains while its engine finishes what it has (the chart's preStop).
"""

from __future__ import annotations

import os
import re
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from gateway.routing.discovery.config import SERVICE_ACCOUNT_DIR, DiscoveryConfig, KubernetesDiscovery
from gateway.routing.discovery.source import DiscoveryError, Endpoint, address_name
from sluicegate.addresses import address_url

# The admin API's replica name pattern (gateway/admin/replicas.py): a Pod name longer than it is named by address.
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def api_url(target: KubernetesDiscovery) -> str:
    if target.api_url is not None:
        return target.api_url.rstrip("/")
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ValueError(
            "discovery.kubernetes: KUBERNETES_SERVICE_HOST is not set (not in a cluster?); set discovery.kubernetes.api_url"
        )
    return address_url("https", host, int(port))


class EndpointSliceSource:
    """`discovery: {kubernetes: {service, namespace, port_name}}`."""

    def __init__(self, config: DiscoveryConfig, client: httpx.AsyncClient | None = None) -> None:
        assert config.kubernetes is not None  # build_source picks this source for it
        self.config = config
        self.target = config.kubernetes
        self.base_url = api_url(self.target)
        self._client = client or httpx.AsyncClient(verify=self._verify(), timeout=self.target.timeout_s)

    def _verify(self) -> ssl.SSLContext | bool:
        if self.target.ca_file is None or not self.base_url.startswith("https://"):
            return True
        if not Path(self.target.ca_file).is_file():
            raise ValueError(f"discovery.kubernetes.ca_file {self.target.ca_file!r} does not exist")
        return ssl.create_default_context(cafile=self.target.ca_file)

    async def resolve(self) -> frozenset[Endpoint]:
        namespace = self.target.namespace or _read(f"{SERVICE_ACCOUNT_DIR}/namespace")
        selector = quote(f"kubernetes.io/service-name={self.target.service}", safe="")
        url = f"{self.base_url}/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices?labelSelector={selector}"
        headers = {"authorization": f"Bearer {_read(self.target.token_file)}", "accept": "application/json"}
        try:
            response = await self._client.get(url, headers=headers)
        except httpx.HTTPError as exc:
            raise DiscoveryError(f"EndpointSlices of {namespace}/{self.target.service}: {exc!r}") from None
        if response.status_code != 200:
            raise DiscoveryError(
                f"EndpointSlices of {namespace}/{self.target.service}: HTTP {response.status_code} {response.text[:200]}"
            )
        try:
            return parse_endpoint_slices(response.json(), self.target.port_name, self.config.scheme)
        except ValueError as exc:  # includes JSONDecodeError
            raise DiscoveryError(f"EndpointSlices of {namespace}/{self.target.service}: {exc}") from None

    async def close(self) -> None:
        await self._client.aclose()


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise DiscoveryError(f"cannot read {path}: {exc}") from None


def parse_endpoint_slices(body: Any, port_name: str | None, scheme: str = "http") -> frozenset[Endpoint]:
    """An EndpointSliceList (discovery.k8s.io/v1) -> its ready endpoints; ValueError names what is malformed."""
    if not isinstance(body, dict) or not isinstance(body.get("items"), list):
        raise ValueError("not an EndpointSliceList (no `items` list)")
    endpoints: set[Endpoint] = set()
    for item in body["items"]:
        if not isinstance(item, dict):
            raise ValueError("an EndpointSlice is not an object")
        port = _slice_port(item.get("ports") or [], port_name)
        if port is None:
            continue  # a slice without the port (another port set of the Service): none of its endpoints serve it
        for endpoint in item.get("endpoints") or []:
            found = _endpoint(endpoint, port, scheme)
            if found is not None:
                endpoints.add(found)
    return frozenset(endpoints)


def _slice_port(ports: list[Any], port_name: str | None) -> int | None:
    if port_name is None:
        if len(ports) > 1:
            raise ValueError(f"the slice has {len(ports)} ports: set discovery.kubernetes.port_name")
        chosen = ports[0] if ports else None
    else:
        chosen = next((p for p in ports if isinstance(p, dict) and p.get("name") == port_name), None)
    if chosen is None:
        return None
    port = chosen.get("port") if isinstance(chosen, dict) else None
    if not isinstance(port, int) or isinstance(port, bool):
        raise ValueError(f"port {chosen!r} has no integer `port`")  # nil: "all ports" -- the Service has no port
    return port


def _endpoint(endpoint: Any, port: int, scheme: str) -> Endpoint | None:
    if not isinstance(endpoint, dict):
        raise ValueError("an endpoint is not an object")
    conditions = endpoint.get("conditions") or {}
    if conditions.get("ready") is False:
        return None
    addresses = endpoint.get("addresses")
    if not isinstance(addresses, list) or not addresses or not isinstance(addresses[0], str):
        raise ValueError(f"endpoint without addresses: {endpoint!r}"[:200])
    address = addresses[0]  # the API: consumers use the first (the rest are interchangeable)
    target = endpoint.get("targetRef") or {}
    name = target.get("name") if target.get("kind") == "Pod" else endpoint.get("hostname")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        name = address_name(address, port)
    return Endpoint(name, address_url(scheme, address, port))
