"""Iteration-level scheduling under a per-step token budget.

Each step, in order:
  1. running sequences (admission order): a decode takes 1 token of the budget, an unfinished prefill takes a
     chunk; when blocks run out, the most recently admitted running sequence is preempted (recompute or swap)
     until the current one fits;
  2. swapped-out sequences come back (swap mode), oldest first, if nothing was preempted this step;
  3. waiting sequences are admitted FIFO while there is budget, a sequence slot, and KV room above the
     watermark; a prompt hit in the prefix cache only pays for its uncached tail.
Decodes are scheduled before prefills, so a long prompt never stalls them: it is chunked around them instead.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from engine.config import EngineConfig
from engine.kv_cache_manager import KVCacheManager
from engine.sequence import Sequence, SequenceStatus
from engine.stats import EngineStats


@dataclass
class SchedulerOutput:
    scheduled: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, tokens to compute this step)
    num_batched_tokens: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    def __init__(self, config: EngineConfig, kv: KVCacheManager, stats: EngineStats):
        self.config = config
        self.kv = kv
        self.stats = stats
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order: the last is preempted first
        self.swapped: deque[Sequence] = deque()
        self.watermark_blocks = int(config.kv_admission_watermark * kv.pool.num_blocks)
        self.chunk_limit = config.long_prefill_token_threshold or config.max_num_batched_tokens
        self.num_finished = 0  # sequences finished since remove_finished last ran

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.swapped)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def add_running(self, seq: Sequence) -> None:
        """A forked sibling: it already holds (shared) blocks and joins the running batch directly."""
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)

    def finish(self, seq: Sequence) -> None:
        """seq is done (stopped, at its length, or aborted): its KV goes now, the queues drop it at remove_finished."""
        if seq.status is SequenceStatus.SWAPPED:
            self.kv.release_host_blocks(seq)
        seq.status = SequenceStatus.FINISHED
        self.kv.free(seq)
        self.num_finished += 1

    def remove_finished(self) -> None:
        """Drop finished sequences (rebuilt lists: O(n) once per step, not per removal; nothing when none finished)."""
        if not self.num_finished:
            return
        self.num_finished = 0
        if any(s.is_finished for s in self.running):
            self.running = [s for s in self.running if not s.is_finished]
        if any(s.is_finished for s in self.waiting):
            self.waiting = deque(s for s in self.waiting if not s.is_finished)
        if any(s.is_finished for s in self.swapped):
            self.swapped = deque(s for s in self.swapped if not s.is_finished)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        budget, preempted = self._schedule_running(out, budget)
        if not preempted and (self.swapped or self.waiting):  # nothing to admit: no seats to count
            # A request with n > 1 forks its n - 1 siblings into the running batch when its prompt is done: they
            # hold seats against max_num_seqs from its admission on, so the batch never outgrows it.
            seats = sum(_seats(s) for s in self.running)
            budget, seats = self._schedule_swapped(out, budget, seats)
            if not self.swapped:
                budget = self._schedule_waiting(out, budget, seats)
        out.num_batched_tokens = self.config.max_num_batched_tokens - budget
        return out

    # -- phase 1 ------------------------------------------------------------------------------------------------
    def _schedule_running(self, out: SchedulerOutput, budget: int) -> tuple[int, bool]:
        preempted = False
        running = self.running
        i = 0
        scheduled, allocate_slots, chunk_limit = out.scheduled, self.kv.allocate_slots, self.chunk_limit
        bs = self.kv.block_size
        while i < len(running) and budget > 0:
            seq = running[i]
            start = seq.num_computed_tokens
            num_left = len(seq.token_ids) - start
            num_new = 1 if num_left == 1 else min(num_left, budget, chunk_limit)  # a decode: 1 (budget > 0 here)
            # KVCacheManager.allocate_slots's first test, inlined (this loop runs for every running sequence): the
            # new tokens fit in the table's blocks, and the one written first is not shared (no copy-on-write).
            table = seq.block_table
            fits = start + num_new <= len(table) * bs and (start % bs == 0 or table[start // bs].ref_cnt <= 1)
            if not fits:
                while not allocate_slots(seq, num_new):
                    victim = running.pop()
                    self._preempt(victim)
                    preempted = True
                    if victim is seq:
                        break
                else:
                    fits = True
            if fits:
                scheduled.append((seq, num_new))
                budget -= num_new
                if num_new < num_left:  # _count_chunk, inlined
                    self.stats.num_chunked_prefill_steps_total += 1
            i += 1
        return budget, preempted

    def _preempt(self, seq: Sequence) -> None:
        self.stats.num_preemptions_total += 1
        if self.config.preemption_mode == "swap" and self.kv.swap_out(seq):
            seq.status = SequenceStatus.SWAPPED
            self.swapped.append(seq)
            self.stats.num_swapped_out_total += 1
            return
        # Recompute: drop the KV; the sequence (prompt + output so far) is prefilled again later, mostly from the
        # prefix cache if its blocks survive.
        self.kv.drop(seq)
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)

    # -- phase 2 ------------------------------------------------------------------------------------------------
    def _schedule_swapped(self, out: SchedulerOutput, budget: int, seats: int) -> tuple[int, int]:
        while self.swapped and budget > 0:
            seq = self.swapped[0]
            if seats + _seats(seq) > self.config.max_num_seqs:
                break
            if not self.kv.swap_in(seq, reserve_blocks=self._reserve_blocks()):
                break
            self.swapped.popleft()
            seats += _seats(seq)
            self.stats.num_swapped_in_total += 1
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            num_new = min(seq.num_tokens - seq.num_computed_tokens, budget, self.chunk_limit)
            if not self.kv.allocate_slots(seq, num_new):
                break  # it holds its blocks and runs next step
            out.scheduled.append((seq, num_new))
            budget -= num_new
        return budget, seats

    # -- phase 3 ------------------------------------------------------------------------------------------------
    def _schedule_waiting(self, out: SchedulerOutput, budget: int, seats: int) -> int:
        chunked = self.config.enable_chunked_prefill
        while self.waiting and budget > 0:
            seq = self.waiting[0]
            if seats + _seats(seq) > self.config.max_num_seqs:
                break
            cached = self.kv.find_cached_prefix(seq)
            num_cached_tokens = len(cached) * self.kv.block_size
            num_new = seq.num_tokens - num_cached_tokens
            # Without chunked prefill a prompt runs whole; a preempted sequence (prompt + output) may have outgrown
            # the budget, so it is chunked rather than left to block the queue forever.
            if not chunked and num_new > budget and seq.num_output_tokens == 0:
                break
            num_new = min(num_new, budget, self.chunk_limit)
            if not self.kv.allocate_slots(seq, num_new, cached, reserve_blocks=self._reserve_blocks()):
                break
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            out.scheduled.append((seq, num_new))
            budget -= num_new
            seats += _seats(seq)
            self._count_admission(seq, num_cached_tokens)
            self._count_chunk(seq, num_new)
        return budget

    def _reserve_blocks(self) -> int:
        """The watermark keeps room for running sequences to grow into; with none running it only keeps out a
        sequence that needs nearly the whole pool, which would then wait forever (and everything behind it)."""
        return self.watermark_blocks if self.running else 0

    def _count_admission(self, seq: Sequence, num_cached_tokens: int) -> None:
        request = seq.request
        if request.first_scheduled_time is None:
            request.first_scheduled_time = time.monotonic()
            request.num_cached_tokens = num_cached_tokens
            self.stats.prompt_tokens_total += len(request.prompt_token_ids)
        self.stats.prefix_cache_queries_total += seq.num_tokens
        self.stats.prefix_cache_hits_total += num_cached_tokens

    def _count_chunk(self, seq: Sequence, num_new: int) -> None:
        if seq.num_computed_tokens + num_new < seq.num_tokens:
            self.stats.num_chunked_prefill_steps_total += 1


def _seats(seq: Sequence) -> int:
    """Running-batch seats a sequence takes: itself, plus the siblings its request forks after the prompt."""
    request = seq.request
    return 1 if request.forked else request.params.n
