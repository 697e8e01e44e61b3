"""A per-replica circuit breaker fed by request outcomes (passive health).

    closed ──(failure_threshold consecutive failures)──> open ──(open_s elapsed)──> half_open
    half_open ──(the one trial request succeeds)──> closed
    half_open ──(it fails)──> open again, for twice as long (up to 8 x open_s)

Open: the replica gets no requests. Half-open: exactly one request is let through as a trial, so a replica that is
still broken costs one failed request per open period, not a burst.

    any state ──(active health saw the replica down, then up again: `record_recovery`)──> closed

Why the recovery edge: a replica that was killed and restarted has proved with its probes that it serves again. Making
it wait out the open period and then take one trial at a time (a long generation holds the slot for minutes) refused
traffic a healthy replica could take. A replica whose probes never failed (it answers /health but fails requests)
gets no such shortcut: only its own requests close its breaker.
"""

from __future__ import annotations

import time
from collections.abc import Callable

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
_MAX_BACKOFF = 8


class CircuitBreaker:
    def __init__(self, failure_threshold: int, open_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.failure_threshold = failure_threshold
        self.open_s = open_s
        self._clock = clock
        self._state = CLOSED
        self._consecutive_failures = 0
        self._opened_at_s = 0.0
        self._backoff = 1
        self._trial_in_flight = False

    @property
    def state(self) -> str:
        if self._state == OPEN and self._clock() - self._opened_at_s >= self.open_s * self._backoff:
            self._state = HALF_OPEN
            self._trial_in_flight = False
        return self._state

    def allows(self) -> bool:
        """Whether a new request may go to this replica now (does not take the half-open trial slot)."""
        state = self.state
        return state == CLOSED or (state == HALF_OPEN and not self._trial_in_flight)

    def on_routed(self) -> bool:
        """A request was sent to this replica; True when it is the half-open trial (hand that to record_neutral)."""
        if self.state == HALF_OPEN and not self._trial_in_flight:
            self._trial_in_flight = True
            return True
        return False

    def retry_after_s(self) -> float:
        if self.state != OPEN:
            return 0.0
        return max(0.0, self._opened_at_s + self.open_s * self._backoff - self._clock())

    def record_neutral(self, was_trial: bool) -> None:
        """The request ended without saying anything about the replica (the client went away). Only the trial's own
        end frees the trial slot: an older request ending neutral must not let a second trial through."""
        if was_trial:
            self._trial_in_flight = False

    def record_success(self) -> None:
        self._state = CLOSED
        self._consecutive_failures = 0
        self._backoff = 1
        self._trial_in_flight = False

    def record_recovery(self) -> None:
        """Active health saw the replica down and then up: whatever its requests said before, it is a new process."""
        self.record_success()

    def record_failure(self) -> None:
        if self.state == HALF_OPEN:
            self._backoff = min(self._backoff * 2, _MAX_BACKOFF)
            self._open()
            return
        self._consecutive_failures += 1
        if self._state == CLOSED and self._consecutive_failures >= self.failure_threshold:
            self._open()

    def _open(self) -> None:
        self._state = OPEN
        self._opened_at_s = self._clock()
        self._trial_in_flight = False
