"""One upstream replica as the router sees it: health, breaker, lifecycle, load and what its feed reported."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.routing.base import ReplicaInfo
from gateway.routing.circuit_breaker import CircuitBreaker
from gateway.routing.config import HealthConfig, ReplicaConfig
from gateway.routing.policies.base import ReplicaLoad

# Lifecycle: active -> draining (no new requests; in-flight ones finish) -> removing (draining, then gone once idle).
ACTIVE, DRAINING, REMOVING = "active", "draining", "removing"


@dataclass
class Replica:
    config: ReplicaConfig
    breaker: CircuitBreaker
    state: str = ACTIVE
    healthy: bool = True
    """Optimistic until the first probe: a fresh pool serves at once; a dead one fails fast and trips its breaker."""
    consecutive_probe_failures: int = 0
    consecutive_probe_successes: int = 0
    load: ReplicaLoad = field(default_factory=ReplicaLoad)
    kv_feed_connected: bool = False

    @classmethod
    def from_config(cls, config: ReplicaConfig, health: HealthConfig) -> Replica:
        return cls(config=config, breaker=CircuitBreaker(health.breaker_failures, health.breaker_open_s))

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def url(self) -> str:
        return self.config.url

    def routable(self) -> bool:
        return self.state == ACTIVE and self.healthy and self.breaker.allows()

    def record_probe(self, ok: bool, health: HealthConfig) -> None:
        if ok:
            self.consecutive_probe_failures = 0
            self.consecutive_probe_successes += 1
            if self.consecutive_probe_successes >= health.healthy_after:
                if not self.healthy:  # down, now up again (a restart): it takes traffic at once, breaker or not
                    self.breaker.record_recovery()
                self.healthy = True
        else:
            self.consecutive_probe_successes = 0
            self.consecutive_probe_failures += 1
            if self.consecutive_probe_failures >= health.unhealthy_after:
                self.healthy = False

    def info(self, model: str, cached_blocks: int) -> ReplicaInfo:
        return ReplicaInfo(
            model=model,
            name=self.name,
            url=self.url,
            role=self.config.role,
            state=self.state,
            healthy=self.healthy,
            breaker=self.breaker.state,
            kv_events=self.config.kv_events,
            kv_feed_connected=self.kv_feed_connected,
            inflight_requests=self.load.inflight_requests,
            waiting_requests=self.load.waiting_requests,
            kv_usage=self.load.kv_usage,
            cached_blocks=cached_blocks,
        )
