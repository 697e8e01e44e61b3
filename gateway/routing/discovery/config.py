"""The `discovery:` section of a model (gateway/config.py): where its replicas are found instead of (or besides)
a static `replicas:` list.

    models:
      llama:
        discovery: {dns: engine-headless.ns.svc.cluster.local, port: 8100, interval_s: 5}      # A/AAAA records
      llama-srv:
        discovery: {srv: _http._tcp.engine-headless.ns.svc.cluster.local, interval_s: 5}     # SRV: host and port
      llama-k8s:
        discovery: {kubernetes: {service: engine-headless, namespace: ns, port_name: http}, interval_s: 5}

Exactly one of dns, srv or kubernetes. Replicas found are named after what identifies them: the address and port
(`10.0.0.5-8100`) for A records, the target's first label (`engine-0`) for SRV, the Pod (`engine-0`) for
EndpointSlices, so metrics and the admin API name them as Kubernetes does where it can.

A disaggregated model's pools scale on their own, so each is found on its own: `discovery` may be a list of entries,
each with its source and `role`, one loop each:

      llama-split:
        discovery:
          - {dns: prefill-headless.ns.svc.cluster.local, port: 8100, role: prefill}
          - {dns: decode-headless.ns.svc.cluster.local, port: 8100, role: decode}

With several entries each replica's name starts with its entry's `prefix` (default: the role), `prefill-engine-0`:
two Services may hold Pods of one name (in two namespaces), and a name is a replica's key in the router.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, TypeAdapter, model_validator

from gateway.routing.base import Role
from gateway.routing.config import RoleField
from sluicegate.schema import Schema

Port = Annotated[int, Field(ge=1, le=65535)]

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class KubernetesDiscovery(Schema):
    service: Annotated[str, Field(min_length=1)]
    """The Service whose EndpointSlices list the replicas (label kubernetes.io/service-name)."""
    namespace: str | None = None
    """Its namespace; None: the gateway's own (the service account's `namespace` file)."""
    port_name: str | None = None
    """The EndpointSlice port to use, by name (the Service port's name); None: the slice's only port."""
    api_url: str | None = None
    """The API server; None: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (in-cluster)."""
    token_file: str = f"{SERVICE_ACCOUNT_DIR}/token"
    """Bearer token, read again on every poll (Kubernetes rotates projected tokens)."""
    ca_file: str | None = f"{SERVICE_ACCOUNT_DIR}/ca.crt"
    """CA bundle that signs the API server's certificate; None: the system's."""
    timeout_s: Annotated[float, Field(gt=0)] = 5.0
    """Bound on one list call."""


class DiscoveryConfig(Schema):
    dns: str | None = None
    """A name whose A/AAAA records are the replicas (a headless Service: one record per ready Pod); needs `port`."""
    srv: str | None = None
    """An SRV name (_port._proto.service...): each record gives a replica's host and port."""
    kubernetes: KubernetesDiscovery | None = None
    """Watch a Service's EndpointSlices through the Kubernetes API (ready endpoints only)."""
    port: Port | None = None
    """The replicas' port, for `dns` (SRV records and EndpointSlices carry their own)."""
    scheme: Literal["http", "https"] = "http"
    """URL scheme of the replicas found."""
    interval_s: Annotated[float, Field(gt=0)] = 5.0
    """Period of the look-up: a replica joins or leaves the pool within about this long."""
    kv_events: bool = True
    """Whether the replicas found publish GET /v1/kv/events (sluicegate engines do; false for vLLM and others)."""
    role: RoleField = Role.BOTH
    """The role of the replicas found (prefill, decode or both): a disaggregated model lists one entry per pool, or
    discovers one pool and lists the other under `replicas`."""
    prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.]{1,16}$")] | None = None
    """What the names of the replicas found start with (`<prefix>-<name>`); None: nothing for a model's only entry,
    the role where it has several. No dash in it, so two prefixes never make one name."""
    nameservers: list[str] | None = None
    """Resolvers to ask, as `ip` or `ip:port`; None: the system's (/etc/resolv.conf)."""
    timeout_s: Annotated[float, Field(gt=0)] = 2.0
    """Bound on one DNS look-up."""

    @model_validator(mode="after")
    def _one_source(self) -> DiscoveryConfig:
        given = [key for key in ("dns", "srv", "kubernetes") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of dns, srv or kubernetes (got {given or 'none'})")
        if self.dns is not None and self.port is None:
            raise ValueError("dns needs `port`: A records carry no port (or use srv)")
        if self.dns is None and self.port is not None:
            raise ValueError("`port` applies to dns only: SRV records and EndpointSlices carry their own port")
        return self


def _one_or_several(value: Any) -> DiscoveryConfig | list[DiscoveryConfig]:
    """A mapping stays one entry (and its errors keep today's paths, `discovery.port`); a list is several
    (`discovery[1].port`)."""
    if isinstance(value, list):
        return _SEVERAL.validate_python(value)
    return _ONE.validate_python(value)


_ONE = TypeAdapter(DiscoveryConfig)
_SEVERAL = TypeAdapter(Annotated[list[DiscoveryConfig], Field(min_length=1)])

DiscoverySection = Annotated[DiscoveryConfig | list[DiscoveryConfig], PlainValidator(_one_or_several)]
"""A model's `discovery:`: one entry, or a list of them (a pool each)."""


def entries(section: DiscoveryConfig | list[DiscoveryConfig] | None) -> list[DiscoveryConfig]:
    """The entries of a model's `discovery:` section, in order (none without one)."""
    if section is None:
        return []
    return section if isinstance(section, list) else [section]


def name_prefixes(found: list[DiscoveryConfig]) -> list[str]:
    """Each entry's replica-name prefix ("" for none): its `prefix`, else its role where there are several."""
    several = len(found) > 1
    return [entry.prefix or (entry.role.value if several else "") for entry in found]
