"""The step clock bills each stretch of a step to the phase that ends it, and records nothing while off."""

from __future__ import annotations

from engine.step_profile import PHASES, StepClock


def test_laps_are_billed_to_their_phase_and_medians_taken_over_steps():
    ticks = iter([0.0, 1.0, 3.0, 3.5, 10.0, 12.0, 13.0, 14.0, 15.0, 21.0, 25.0, 25.0])  # seconds
    clock = StepClock()
    clock.timer = lambda: next(ticks)
    clock.enabled = True
    for _ in range(2):  # step 1: 1, 2, 0.5, 6.5, 2 s; step 2: 1, 1, 6, 4, 0 s
        clock.start_step()
        for phase in PHASES:
            clock.lap(phase)
        clock.end_step()
    assert clock.num_steps == 2
    assert clock.steps_s["forward"] == [0.5, 6.0]
    assert clock.median_ms() == {"schedule": 1000.0, "prepare": 1500.0, "forward": 3250.0, "sample": 5250.0,
                                 "output": 1000.0}  # fmt: skip


def test_a_clock_that_is_off_records_nothing():
    clock = StepClock()
    clock.timer = lambda: 1 / 0  # never read while off
    clock.start_step()
    clock.lap("forward")
    clock.end_step()
    assert clock.num_steps == 0
