"""`batch_invariant`: a request's logprobs are bit-identical whatever shares its steps, however its prompt is chunked
and at one thread or two, so a greedy output cannot depend on load. The `small` preset is used because its
1,024-wide down projection is where CPU BLAS sums differently past a few dozen rows (the tiny preset's products are
too small to show it); without the mode this test fails on the project's CI box."""

from __future__ import annotations

import random

import pytest
import torch

from engine import LLM, SamplingParams

OUTPUT_TOKENS = 24


@pytest.fixture(scope="module")
def small_model_dir(tmp_path_factory) -> str:
    from engine.tiny_model import make_tiny_model

    return str(make_tiny_model(tmp_path_factory.mktemp("small-llama"), preset="small"))


def _logprobs(model_dir: str, prompts: list[list[int]], budget: int, threads: int) -> list[float]:
    previous = torch.get_num_threads()
    try:
        llm = LLM(
            model_dir,
            batch_invariant=True,
            max_num_batched_tokens=budget,
            max_num_seqs=min(64, budget),
            num_kv_blocks=512,
            cpu_threads=threads,
        )
        params = SamplingParams(max_tokens=OUTPUT_TOKENS, temperature=0.0, ignore_eos=True, logprobs=0)
        output = llm.generate(prompts, params)[0].outputs[0]
    finally:
        torch.set_num_threads(previous)
    assert output.logprobs is not None and len(output.logprobs) == OUTPUT_TOKENS
    return [entry.logprob for entry in output.logprobs]


def test_a_request_gets_the_same_bits_alone_beside_others_chunked_and_at_any_thread_count(small_model_dir):
    rng = random.Random(0)
    target = [rng.randrange(5, 4096) for _ in range(120)]
    others = [[rng.randrange(5, 4096) for _ in range(rng.randrange(16, 200))] for _ in range(12)]
    alone = _logprobs(small_model_dir, [target], budget=2048, threads=1)
    runs = {
        "beside 12 others (steps of up to ~1,300 rows)": _logprobs(small_model_dir, [target, *others], 2048, 1),
        "chunked by 16 tokens": _logprobs(small_model_dir, [target], 16, 1),
        "others, 2 threads, 64-token steps": _logprobs(small_model_dir, [target, *others], 64, 2),
    }
    for name, logprobs in runs.items():
        first = next((i for i, (a, b) in enumerate(zip(logprobs, alone)) if a != b), None)
        assert first is None, f"{name}: logprob {first} differs ({logprobs[first]!r} vs {alone[first]!r})"


def test_batch_invariant_is_refused_off_the_cpu(small_model_dir):
    from engine.config import EngineConfig

    with pytest.raises(ValueError, match="batch_invariant runs on CPU"):
        EngineConfig(model=small_model_dir, batch_invariant=True, device="cuda")
    with pytest.raises(ValueError, match="batch_invariant runs on CPU"):
        EngineConfig(model=small_model_dir, batch_invariant=True, attention_backend="triton")
