"""The scheduler's step counts, kept as it goes instead of recounted: each step's num_batched_tokens is the sum of
what it scheduled, and a chunked-prefill step is counted exactly when some sequence ends the step short of its
tokens, through admissions, chunked prompts, decodes and preemptions."""

from __future__ import annotations

import random

from engine import LLM, SamplingParams
from engine.scheduler import SchedulerOutput


def test_batched_tokens_and_chunk_counts_match_a_recount(tiny_model_dir):
    llm = LLM(
        tiny_model_dir, max_num_seqs=8, max_num_batched_tokens=64, long_prefill_token_threshold=24, num_kv_blocks=20
    )
    engine = llm.engine
    scheduler = engine.scheduler
    schedule = scheduler.schedule
    steps: list[tuple[int, int, int]] = []  # (num_batched_tokens, recounted tokens, recounted chunked steps)

    def recounting_schedule() -> SchedulerOutput:
        out = schedule()
        short = [seq for seq, n in out.scheduled if seq.num_computed_tokens + n < seq.num_tokens]
        steps.append((out.num_batched_tokens, sum(n for _, n in out.scheduled), len(short)))
        return out

    scheduler.schedule = recounting_schedule  # type: ignore[method-assign]
    rng = random.Random(3)
    prompts = [[rng.randrange(5, 500) for _ in range(rng.choice([5, 30, 70, 100]))] for _ in range(12)]
    llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True))
    assert all(batched == recount for batched, recount, _ in steps)
    assert engine.counters.num_chunked_prefill_steps_total == sum(short for _, _, short in steps) > 0
    assert engine.counters.num_preemptions_total > 0  # the small pool made the scheduler preempt, too
