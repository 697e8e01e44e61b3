"""A request the KV pool can hold is always scheduled: the admission watermark (room kept for running sequences to
grow) must not keep out a sequence that needs nearly the whole pool when nothing else is running, or it and every
request behind it would wait forever."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams


def _run(engine: LLMEngine, max_steps: int) -> dict[str, str]:
    finished = {}
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            break
        for output in engine.step():
            if output.finished:
                finished[output.request_id] = output.outputs[0].finish_reason
    return finished


@pytest.mark.parametrize("preemption_mode", ["recompute", "swap"])
def test_a_request_needing_nearly_the_whole_pool_runs_and_so_does_the_one_behind_it(tiny_model_dir, preemption_mode):
    # 100 blocks of 4 tokens; the default watermark keeps 1 block free at admission; the prompt needs all 100.
    engine = LLMEngine(
        EngineConfig(
            model=tiny_model_dir,
            device="cpu",
            dtype="float32",
            num_kv_blocks=100,
            block_size=4,
            preemption_mode=preemption_mode,
        )
    )
    engine.add_request("big", [5 + i % 400 for i in range(398)], SamplingParams(max_tokens=2, temperature=0))
    engine.add_request("small", [5, 6, 7], SamplingParams(max_tokens=2, temperature=0))
    assert _run(engine, 500) == {"big": "length", "small": "length"}
    assert engine.pool.num_free_blocks == 100


def test_a_high_watermark_still_admits_into_an_idle_pool(tiny_model_dir):
    engine = LLMEngine(
        EngineConfig(
            model=tiny_model_dir,
            device="cpu",
            dtype="float32",
            num_kv_blocks=10,
            block_size=4,
            kv_admission_watermark=0.3,
        )
    )
    engine.add_request("r", [7] * 30, SamplingParams(max_tokens=5, temperature=0))
    assert _run(engine, 200) == {"r": "length"}


@pytest.mark.parametrize("preemption_mode", ["recompute", "swap"])
def test_forked_siblings_count_against_max_num_seqs(tiny_model_dir, preemption_mode):
    """n > 1 forks n - 1 sequences into the running batch after the prompt: they are counted from admission on."""
    engine = LLMEngine(
        EngineConfig(
            model=tiny_model_dir,
            device="cpu",
            dtype="float32",
            max_num_seqs=4,
            num_kv_blocks=64,
            preemption_mode=preemption_mode,
        )
    )
    engine.add_request("fan-out", [5, 6, 7, 8, 9], SamplingParams(n=3, max_tokens=6, temperature=1.0, seed=1))
    for i in range(3):
        engine.add_request(f"single-{i}", [10 + i, 11, 12], SamplingParams(max_tokens=6, temperature=0))
    largest = 0
    for _ in range(300):
        if not engine.has_unfinished_requests():
            break
        engine.step()
        largest = max(largest, len(engine.scheduler.running))
    assert not engine.has_unfinished_requests() and largest == 4


def test_n_above_max_num_seqs_is_refused(tiny_model_dir):
    from engine.errors import RequestError

    engine = LLMEngine(EngineConfig(model=tiny_model_dir, device="cpu", dtype="float32", max_num_seqs=2))
    with pytest.raises(RequestError, match="max_num_seqs"):
        engine.add_request("r", [5, 6], SamplingParams(n=3, max_tokens=2))
