"""The engine with the Triton kernels (interpreted on CPU) generates exactly what it generates with the torch
references: greedy decoding on the tiny model, with chunked prefill (prompt longer than the step's token budget),
ragged prompts, and small blocks so that sequences span many of them."""

from __future__ import annotations

from engine.llm import LLM
from engine.sampling_params import SamplingParams

PROMPTS = [list(range(5, 23)), [40, 41, 42], list(range(100, 140))]


def greedy_tokens(model_dir: str, backend: str) -> list[list[int]]:
    llm = LLM(
        model=model_dir,
        dtype="float32",
        attention_backend=backend,
        max_num_batched_tokens=32,
        max_num_seqs=4,
        block_size=4,
    )
    outputs = llm.generate(PROMPTS, SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True))
    return [out.outputs[0].token_ids for out in outputs]


def test_greedy_output_identical_with_triton_and_torch(tiny_model_dir):
    triton_tokens = greedy_tokens(tiny_model_dir, "triton")
    assert [len(t) for t in triton_tokens] == [12, 12, 12]
    assert triton_tokens == greedy_tokens(tiny_model_dir, "torch")
