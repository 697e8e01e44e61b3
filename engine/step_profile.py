"""Where a step's time goes: wall time per phase of every step since the last reset.

The engine and the model runner call `lap(phase)` at each phase boundary; with the clock off (the default) that is
one attribute test. `sluicegate bench engine --profile-step` turns it on. On CUDA the clock synchronizes at each
boundary, or a phase's kernels would be billed to whichever later phase first waits for them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

PHASES = ("schedule", "prepare", "forward", "sample", "output")


class StepClock:
    def __init__(self, sync: Callable[[], None] | None = None):
        self.enabled = False
        self.sync = sync  # torch.cuda.synchronize on CUDA: phases are measured when their work is done
        # Wall time by default; time.thread_time counts only this thread's CPU time, which a busy machine does not
        # inflate (but which misses other threads' share of a multi-threaded forward).
        self.timer: Callable[[], float] = time.perf_counter
        self.steps_s: dict[str, list[float]] = {p: [] for p in PHASES}  # phase -> its seconds in each step
        self._step_s: dict[str, float] = dict.fromkeys(PHASES, 0.0)  # the current step's
        self._last_s = 0.0  # the timer at the previous boundary

    @property
    def num_steps(self) -> int:
        return len(self.steps_s[PHASES[0]])

    def reset(self) -> None:
        self.steps_s = {p: [] for p in PHASES}

    def start_step(self) -> None:
        if self.enabled:
            if self.sync is not None:
                self.sync()
            self._step_s = dict.fromkeys(PHASES, 0.0)
            self._last_s = self.timer()

    def lap(self, phase: str) -> None:
        """Bill the time since the previous boundary to `phase`."""
        if not self.enabled:
            return
        if self.sync is not None:
            self.sync()
        now_s = self.timer()
        self._step_s[phase] += now_s - self._last_s
        self._last_s = now_s

    def end_step(self) -> None:
        if self.enabled:
            for phase, seconds in self._step_s.items():
                self.steps_s[phase].append(seconds)

    def median_ms(self) -> dict[str, float]:
        """Median milliseconds per step, per phase: on a machine shared with other jobs the mean is mostly the
        steps that lost their core."""
        return {p: statistics.median(s) * 1000 if s else 0.0 for p, s in self.steps_s.items()}
