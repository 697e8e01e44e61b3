"""The circuit breaker's state machine on a fake clock, and how active health closes it after a restart."""

from __future__ import annotations

from gateway.routing.circuit_breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker
from gateway.routing.config import HealthConfig, ReplicaConfig
from gateway.routing.replica import Replica


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_opens_after_consecutive_failures_and_a_success_resets_the_count():
    breaker = CircuitBreaker(failure_threshold=3, open_s=5, clock=Clock())
    breaker.record_failure()
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.state == CLOSED
    breaker.record_failure()
    assert breaker.state == OPEN and not breaker.allows()


def test_half_open_lets_one_trial_through_and_backs_off_when_it_fails():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, open_s=5, clock=clock)
    breaker.record_failure()
    assert breaker.retry_after_s() == 5
    clock.now_s = 5
    assert breaker.state == HALF_OPEN and breaker.allows()
    breaker.on_routed()
    assert not breaker.allows()  # only one trial at a time
    breaker.record_failure()
    assert breaker.state == OPEN and breaker.retry_after_s() == 10  # doubled
    clock.now_s = 15
    breaker.on_routed()
    breaker.record_success()
    assert breaker.state == CLOSED and breaker.allows()


def test_a_trial_whose_client_left_frees_the_slot():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, open_s=1, clock=clock)
    breaker.record_failure()
    clock.now_s = 1
    trial = breaker.on_routed()
    breaker.record_neutral(trial)
    assert breaker.state == HALF_OPEN and breaker.allows()


def test_an_older_request_ending_neutral_keeps_the_trial_slot_taken():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=2, open_s=1, clock=clock)
    older = breaker.on_routed()  # routed while closed
    breaker.record_failure()
    breaker.record_failure()
    clock.now_s = 1
    trial = breaker.on_routed()
    assert trial and not older
    breaker.record_neutral(older)  # its client went away: says nothing, and is not the trial
    assert breaker.state == HALF_OPEN and not breaker.allows()
    breaker.record_neutral(trial)
    assert breaker.allows()


def _replica(clock: Clock) -> Replica:
    replica = Replica.from_config(ReplicaConfig(name="r0", url="http://r0"), HealthConfig(unhealthy_after=1))
    replica.breaker = CircuitBreaker(failure_threshold=1, open_s=600, clock=clock)
    return replica


def test_a_replica_seen_down_then_up_by_its_probes_closes_its_breaker():
    replica = _replica(Clock())
    health = HealthConfig(unhealthy_after=1)
    replica.breaker.record_failure()
    replica.record_probe(False, health)  # the process is gone
    replica.record_probe(True, health)  # and back: a restart
    assert replica.breaker.state == CLOSED and replica.routable()


def test_passing_probes_alone_do_not_close_a_breaker_that_requests_opened():
    replica = _replica(Clock())
    health = HealthConfig(unhealthy_after=1)
    replica.breaker.record_failure()  # it answers /health but fails requests
    for _ in range(3):
        replica.record_probe(True, health)
    assert replica.breaker.state == OPEN and not replica.routable()
