"""Replica discovery: a model's replica pool follows DNS or the Kubernetes EndpointSlice API, without a restart.

A model configured with `discovery:` (config.py) gets one `DiscoveryLoop` (loop.py) per entry (one, or a list: a
disaggregated model's prefill and decode pools, each with its role) that asks its source (dns.py, kubernetes.py) for
the current endpoints every `interval_s` and applies the difference through the same `ReplicaAdmin` operations the
admin API uses: `add_replica` for a newcomer, `remove_replica` (drain, then forget once its last request ends) for one
that left. A failed look-up changes nothing: the last known set keeps serving.
"""

from gateway.routing.discovery.config import DiscoveryConfig, KubernetesDiscovery
from gateway.routing.discovery.manager import DiscoveryManager, build_discovery
from gateway.routing.discovery.source import DiscoveryError, Endpoint

__all__ = [
    "DiscoveryConfig",
    "DiscoveryError",
    "DiscoveryManager",
    "Endpoint",
    "KubernetesDiscovery",
    "build_discovery",
]
