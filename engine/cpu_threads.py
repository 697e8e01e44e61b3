"""Intra-op threads that give way to a busy neighbour (CPU replicas with no `cpu_threads` set).

A step of a small model is many short multi-threaded ops; each waits for its slowest thread. On a quiet machine two
threads beat one (the long-tail benchmark: ~1,000 vs ~760 output tok/s on 2 cores); with another process busy on
one of the cores, every op stalls until the descheduled thread runs again, and one thread wins by far (~750 vs ~290
tok/s). So at start-up and then every `sample_every_steps` steps the engine counts the tasks running on the machine
that are not its own (/proc/loadavg's runnable count minus this process's running threads, at most the cores),
smooths it, and uses the cores left: min(max_threads, cores - others), at least 1. A sample reads /proc/loadavg and
one file per thread of this process (~80 us for 4 threads): ~10 us per step at one sample in 8. The first sample
decides the first steps, which are the costliest to get wrong (a burst of prefills).
Linux only; elsewhere the thread count stays as torch set it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

_LOADAVG = Path("/proc/loadavg")
_TASKS = Path("/proc/self/task")


def running_elsewhere() -> int:
    """Runnable tasks on the machine that are not this process's threads."""
    runnable = int(_LOADAVG.read_text().split()[3].split("/")[0])
    own = 0
    for task in os.scandir(_TASKS):
        try:
            stat = Path(task.path, "stat").read_bytes()
        except OSError:  # the thread ended meanwhile
            continue
        own += stat.rsplit(b")", 1)[1].split(None, 1)[0] == b"R"
    return max(0, runnable - own)


def supported() -> bool:
    return _LOADAVG.is_file() and _TASKS.is_dir()


class AdaptiveThreads:
    def __init__(
        self,
        max_threads: int,
        set_threads: Callable[[int], None],
        cores: int | None = None,
        sample_every_steps: int = 8,
        smoothing: float = 0.5,
        count_others: Callable[[], int] = running_elsewhere,
    ) -> None:
        self.max_threads = max_threads
        self.cores = cores or len(os.sched_getaffinity(0))
        self.sample_every_steps = sample_every_steps
        self.smoothing = smoothing  # the weight of a new sample: a neighbour that stays busy shows at once
        self._set_threads = set_threads
        self._count_others = count_others
        self._others = float(self._sample())
        self._steps = 0
        self.threads = max_threads
        self._apply()

    def after_step(self) -> None:
        self._steps += 1
        if self._steps % self.sample_every_steps:
            return
        self._others += self.smoothing * (self._sample() - self._others)
        self._apply()

    def _sample(self) -> int:
        # No more than the cores: other tasks can take at most all of them. A burst of threads waking at once (a
        # broker's schedulers: 11-14 runnable for a moment on a quiet 2-core box) would otherwise weigh like a
        # dozen neighbours and hold this engine at one thread for four samples.
        return min(self._count_others(), self.cores)

    def _apply(self) -> None:
        # A core counts as taken at 0.75 of a busy task on average: a task seen once (0.5) is a blip (a daemon
        # waking), seen twice in a row (0.75) a neighbour; one quiet sample then gives the core back.
        wanted = max(1, min(self.max_threads, self.cores - int(self._others + 0.25)))
        if wanted != self.threads:
            self.threads = wanted
            self._set_threads(wanted)
