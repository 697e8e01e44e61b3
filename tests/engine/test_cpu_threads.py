"""Adaptive intra-op threads (engine/cpu_threads.py): fewer threads while other processes keep the cores busy."""

from __future__ import annotations

import subprocess
import sys
import time

from engine.cpu_threads import AdaptiveThreads, running_elsewhere, supported


def drive(threads: AdaptiveThreads, steps: int) -> None:
    for _ in range(steps):
        threads.after_step()


def test_a_neighbour_busy_at_start_up_is_seen_before_the_first_step():
    calls: list[int] = []
    threads = AdaptiveThreads(2, calls.append, cores=2, count_others=lambda: 1)
    assert threads.threads == 1 and calls == [1]


def test_threads_give_way_to_a_busy_neighbour_and_come_back():
    others = [0]
    calls: list[int] = []
    threads = AdaptiveThreads(2, calls.append, cores=2, sample_every_steps=4, count_others=lambda: others[0])
    drive(threads, 40)
    assert threads.threads == 2 and calls == []  # quiet: torch's own count, never touched
    others[0] = 1  # a process busy on one of the two cores
    drive(threads, 40)
    assert threads.threads == 1 and calls == [1]
    others[0] = 0
    drive(threads, 80)
    assert threads.threads == 2 and calls == [1, 2]


def test_a_blip_costs_one_sample_and_the_count_never_drops_below_one():
    others = [0]
    calls: list[int] = []
    threads = AdaptiveThreads(4, calls.append, cores=4, sample_every_steps=1, count_others=lambda: others[0])
    others[0] = 1
    drive(threads, 1)  # one busy task seen once: a blip, no core given up
    others[0] = 0
    drive(threads, 5)
    assert calls == []
    others[0] = 9  # more busy tasks than cores
    drive(threads, 30)
    assert threads.threads == 1 and calls[-1] == 1


def test_a_burst_of_waking_threads_costs_one_sample():
    others = [0]
    calls: list[int] = []
    threads = AdaptiveThreads(2, calls.append, cores=2, sample_every_steps=1, count_others=lambda: others[0])
    others[0] = 13  # a broker's schedulers all runnable at one instant
    drive(threads, 1)
    others[0] = 0
    drive(threads, 1)  # one quiet sample gives the cores back, as after any single busy sample
    assert calls == [1, 2] and threads.threads == 2


def test_a_busy_process_is_counted_and_this_process_threads_are_not():
    assert supported()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        assert max(running_elsewhere() for _ in range(50)) >= 1
    finally:
        busy.kill()
        busy.wait()
