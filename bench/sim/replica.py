"""One simulated replica, scheduled like our engine (engine/scheduler.py): continuous batching under a token budget.

Each step: admit waiting requests FCFS while the running batch has room and their blocks fit (the prefix cache
match is taken at admission); every decoding sequence takes one token of the budget; prefill chunks (FCFS, a long
prompt over several steps) take the rest. The step lasts `StepProfile.step_s` of what it batched, so decodes slow
down with the batch and with their context, and a prefill shares its steps with the decodes. Each chunk publishes
the blocks it completed to the prefix cache when its step ends (the engine caches each full block after the step
that computed it); the last chunk also yields the first token (TTFT ends there).

Speed: steps with no prefill are decode-only and predictable, so they are taken as one jump of k steps (closed form
for their total time, the context growing by one token per row per step) up to the next completion, the first step
boundary after the cluster's next arrival, or the KV limit. A request that arrives mid-step waits for that step,
as in the engine.

KV pressure: decode growth first evicts unreferenced cached blocks (the replica's eviction policy); when none are left the most recently
admitted request is preempted (its blocks freed, recomputed later: vLLM's recompute preemption).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

from bench.sim.kv import BLOCK_TOKENS, ReplicaKv
from bench.sim.profiles import StepProfile
from engine.prefix_eviction import PrefixEviction


@dataclass(slots=True, eq=False)
class SimRequest:
    index: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    hashes: list[int]
    matched_blocks: int = 0
    resident_blocks: int = 0
    """Leading prompt blocks this admission holds resident: the matched prefix, then each block once computed."""
    cached_tokens: int = 0
    """Prompt tokens the replica's cache held at (first) admission: the hit."""
    prefill_left: int = 0
    prefill_done: int = 0
    generated: int = 0
    decode_join_step: int = 0
    first_token_s: float = -1.0
    admissions: int = 0


@dataclass
class StepPlan:
    end_s: float
    steps: int
    chunks: list[tuple[SimRequest, int]] = field(default_factory=list)


class SimReplica:
    def __init__(
        self, index: int, profile: StepProfile, kv_capacity_tokens: int, eviction: PrefixEviction = PrefixEviction.GDSF
    ) -> None:
        self.index = index
        self.profile = profile
        self.kv = ReplicaKv(kv_capacity_tokens, eviction)
        self.waiting: deque[SimRequest] = deque()
        self.prefilling: list[SimRequest] = []
        self.decoding: set[SimRequest] = set()
        self.admitted_order: list[SimRequest] = []  # running requests, oldest admission first (preemption victims last)
        self.completions: list[tuple[int, int, int, SimRequest]] = []  # heap: (end step, index, admission, request)
        self.decode_steps = 0
        self.decode_context_tokens = 0  # sum of (prompt + generated) over decoding rows
        self.plan: StepPlan | None = None
        self.prefill_tokens_computed = 0
        self.preemptions = 0
        self.finished: list[SimRequest] = []  # ended since the cluster last took them

    # -- the cluster's calls ---------------------------------------------------------------------------------------

    def enqueue(self, request: SimRequest) -> None:
        self.waiting.append(request)

    def start_step(self, now_s: float, next_arrival_s: float) -> float | None:
        """Plan the next step (or decode jump) from `now_s`; its end time, or None when there is nothing to run."""
        while not self._fit_decode_growth(len(self.decoding)):
            pass  # each round preempted one request
        budget = self.profile.token_budget - len(self.decoding)
        chunks: list[tuple[SimRequest, int]] = []
        prefill_pairs = 0
        prefill_tokens = 0
        position = 0
        # Running prefills first, then new admissions while budget is left (a request is matched against the cache
        # when it is first scheduled, so one queued behind a long prefill of its prefix hits once that is published).
        while budget > 0 and (position < len(self.prefilling) or self._admit_one()):
            request = self.prefilling[position]
            position += 1
            chunk = min(request.prefill_left, budget)
            budget -= chunk
            prefill_tokens += chunk
            prefill_pairs += chunk * (request.cached_tokens + request.prefill_done + chunk)
            chunks.append((request, chunk))
        rows = len(self.decoding)
        if not chunks and rows == 0:
            self.plan = None
            return None
        if chunks:
            step_s = self.profile.step_s(prefill_tokens, rows, self.decode_context_tokens, prefill_pairs)
            self.plan = StepPlan(now_s + step_s, 1, chunks)
            return self.plan.end_s
        steps = self._jump_steps(now_s, next_arrival_s, rows)
        self.plan = StepPlan(now_s + self._decode_time_s(steps, rows), steps)
        return self.plan.end_s

    def finish_step(self) -> list[SimRequest]:
        """Apply the planned step(s); returns requests that produced their first token in it."""
        plan = self.plan
        assert plan is not None
        rows = len(self.decoding)
        self.decode_steps += plan.steps
        self.decode_context_tokens += rows * plan.steps
        self.kv.decode_tokens += rows * plan.steps
        firsts: list[SimRequest] = []
        for request, chunk in plan.chunks:
            request.prefill_left -= chunk
            request.prefill_done += chunk
            self.prefill_tokens_computed += chunk
            self._publish_computed(request)
            if request.prefill_left == 0:
                self._prefill_done(request)
                if request.first_token_s < 0:
                    request.first_token_s = plan.end_s
                    firsts.append(request)
        self._complete_until()
        self.plan = None
        return firsts

    # -- internals -------------------------------------------------------------------------------------------------

    def _admit_one(self) -> bool:
        """Move the oldest waiting request into the running batch if it has a seat and its blocks fit."""
        if not self.waiting or len(self.prefilling) + len(self.decoding) >= self.profile.max_running:
            return False
        request = self.waiting[0]
        matched = self.kv.matched_blocks(request.hashes)
        # Room for the decodes' next tokens stays free (vLLM's watermark), or an admission would preempt at once.
        headroom = len(self.decoding) + len(self.prefilling) + 1
        if not self.kv.acquire(request.hashes, matched, headroom):
            return False  # no room even after eviction: it waits for running requests to finish
        self.waiting.popleft()
        cached = _cached_tokens(request, matched)
        if request.admissions == 0:
            request.cached_tokens = cached
        request.matched_blocks = request.resident_blocks = matched
        request.prefill_done = 0
        # After a preemption the generated tokens are recomputed too (they were never cached).
        request.prefill_left = request.prompt_tokens + request.generated - cached
        request.admissions += 1
        self.prefilling.append(request)
        self.admitted_order.append(request)
        return True

    def _publish_computed(self, request: SimRequest) -> None:
        """Blocks the prefill has now computed whole become matchable at once, as the engine caches each full block
        after the step that computed it (kv_cache_manager.commit_scheduled); the last, partial one at the end."""
        if request.prefill_left == 0:
            computed = len(request.hashes)
        else:
            cached = _cached_tokens(request, request.matched_blocks)
            computed = min(len(request.hashes), (cached + request.prefill_done) // BLOCK_TOKENS)
        if computed > request.resident_blocks:
            self.kv.publish(request.hashes, request.resident_blocks, computed)
            request.resident_blocks = computed

    def _prefill_done(self, request: SimRequest) -> None:
        self.prefilling.remove(request)
        if request.generated == 0:
            request.generated = 1  # the prefill's last step samples the first token
        remaining = request.output_tokens - request.generated
        if remaining <= 0:
            self._finish(request)
            return
        self.decoding.add(request)
        self.decode_context_tokens += request.prompt_tokens + request.generated
        self.kv.decode_tokens += request.generated
        request.decode_join_step = self.decode_steps - request.generated  # so generated = steps - join
        heapq.heappush(self.completions, (self.decode_steps + remaining, request.index, request.admissions, request))

    def _complete_until(self) -> None:
        while self.completions and self.completions[0][0] <= self.decode_steps:
            _, _, admission, request = heapq.heappop(self.completions)
            if admission != request.admissions or request not in self.decoding:
                continue  # preempted after this entry was pushed; it pushes a new one when it comes back
            self.decoding.discard(request)
            request.generated = request.output_tokens
            self.decode_context_tokens -= request.prompt_tokens + request.output_tokens
            self.kv.decode_tokens -= request.output_tokens
            self._finish(request)

    def _finish(self, request: SimRequest) -> None:
        self.finished.append(request)
        self.admitted_order.remove(request)
        self.kv.release(request.hashes)

    def _fit_decode_growth(self, rows: int) -> bool:
        """Room for one more token per row; else preempt the newest admission and say so (False)."""
        if rows == 0 or self.kv.make_room(rows):
            return True
        victim = self.admitted_order.pop()
        self.preemptions += 1
        if victim in self.decoding:
            self.decoding.discard(victim)
            victim.generated = self.decode_steps - victim.decode_join_step
            self.decode_context_tokens -= victim.prompt_tokens + victim.generated
            self.kv.decode_tokens -= victim.generated
            self.kv.release(victim.hashes)
        else:
            self.prefilling.remove(victim)
            self.kv.abort_prefill(victim.hashes, victim.resident_blocks)
        self.waiting.appendleft(victim)
        return False

    def _jump_steps(self, now_s: float, next_arrival_s: float, rows: int) -> int:
        until_completion = self.completions[0][0] - self.decode_steps
        until_full = max(1, self.kv.reclaimable_tokens() // rows)
        steps = min(until_completion, until_full)
        gap_s = next_arrival_s - now_s
        if gap_s <= 0:
            return 1
        if math.isinf(gap_s):
            return max(1, steps)
        # Smallest k whose k steps reach the next arrival: first + (first + g) + ... with g = d * rows per step.
        first_s = self.profile.step_s(0, rows, self.decode_context_tokens)
        growth_s = self.profile.context_token_s * rows
        if growth_s > 0:
            half = growth_s / 2
            k = (-(first_s - half) + math.sqrt((first_s - half) ** 2 + 4 * half * gap_s)) / (2 * half)
        else:
            k = gap_s / first_s
        return max(1, min(steps, math.ceil(k)))

    def _decode_time_s(self, steps: int, rows: int) -> float:
        first_s = self.profile.step_s(0, rows, self.decode_context_tokens)
        return steps * first_s + self.profile.context_token_s * rows * steps * (steps - 1) / 2


def _cached_tokens(request: SimRequest, matched_blocks: int) -> int:
    """Prompt tokens a matched prefix spares the prefill: the last token is always computed (it yields the first)."""
    return min(matched_blocks * BLOCK_TOKENS, request.prompt_tokens - 1)
