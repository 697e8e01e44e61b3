"""Embeddings pooled in the engine's step against transformers' final hidden states: last-token and mean pooling,
whole prompts and chunked prefill, beside generation in the same batch, after a prefix-cache hit, and cut to
`dimensions`."""

from __future__ import annotations

import itertools

import pytest
import torch

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.pooling import Pooling, PoolingParams
from engine.sampling_params import SamplingParams

_ids = itertools.count()


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir):
    from transformers import AutoModel

    return AutoModel.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def reference(hf_model, prompt: list[int], pooling: Pooling, dimensions: int | None = None) -> torch.Tensor:
    with torch.inference_mode():
        states = hf_model(torch.tensor([prompt])).last_hidden_state[0]  # [T, H], after the final norm
    vector = states[-1] if pooling is Pooling.LAST else states.mean(dim=0)
    return torch.nn.functional.normalize(vector[:dimensions] if dimensions else vector, dim=0)


def embed(engine: LLMEngine, prompts: list[list[int]], pooling: Pooling, dimensions: int | None = None, generate=()):
    """Run the prompts (and `generate`: plain greedy requests beside them) to completion; the embeddings in order."""
    params = SamplingParams(max_tokens=1, temperature=0.0, pooling=PoolingParams(pooling, dimensions))
    ids = [f"e{next(_ids)}" for _ in prompts]
    for request_id, prompt in zip(ids, prompts):
        engine.add_request(request_id, prompt, params)
    for i, prompt in enumerate(generate):
        engine.add_request(f"g{next(_ids)}-{i}", prompt, SamplingParams(max_tokens=8, temperature=0.0))
    vectors = {}
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished and output.request_id in ids:
                vectors[output.request_id] = output.embedding
    return [torch.tensor(vectors[i]) for i in ids]


PROMPTS = [[7, 8, 9], list(range(5, 45)), list(range(100, 190)), [300]]


@pytest.mark.parametrize("pooling", [Pooling.LAST, Pooling.MEAN])
@pytest.mark.parametrize("chunk", [2048, 16])
def test_pooled_states_match_transformers(tiny_model_dir, hf_model, pooling, chunk):
    engine = LLMEngine(
        EngineConfig(model=tiny_model_dir, num_kv_blocks=128, max_num_seqs=8, max_num_batched_tokens=chunk)
    )
    generated_beside = [list(range(20, 60)), [11, 12]]
    for prompt, vector in zip(PROMPTS, embed(engine, PROMPTS, pooling, generate=generated_beside)):
        assert vector.norm() == pytest.approx(1.0, abs=1e-5)
        torch.testing.assert_close(vector, reference(hf_model, prompt, pooling), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("pooling", [Pooling.LAST, Pooling.MEAN])
def test_a_prefix_cache_hit_leaves_the_embedding_exact(tiny_model_dir, hf_model, pooling):
    engine = LLMEngine(EngineConfig(model=tiny_model_dir, num_kv_blocks=128, max_num_seqs=8))
    prompt = list(range(5, 70))
    engine.add_request("warm", prompt + [1, 2], SamplingParams(max_tokens=1, temperature=0.0))
    while engine.has_unfinished_requests():
        engine.step()
    (vector,) = embed(engine, [prompt], pooling)
    torch.testing.assert_close(vector, reference(hf_model, prompt, pooling), atol=2e-5, rtol=1e-4)


def test_dimensions_cut_before_normalizing(tiny_model_dir, hf_model):
    engine = LLMEngine(EngineConfig(model=tiny_model_dir, num_kv_blocks=64, max_num_seqs=4))
    (vector,) = embed(engine, [PROMPTS[1]], Pooling.LAST, dimensions=8)
    assert vector.shape == (8,)
    torch.testing.assert_close(vector, reference(hf_model, PROMPTS[1], Pooling.LAST, 8), atol=2e-5, rtol=1e-4)


def test_an_embedding_request_takes_one_prompt_pass():
    from engine.errors import RequestError

    with pytest.raises(RequestError):
        SamplingParams(n=2, max_tokens=1, pooling=PoolingParams(Pooling.LAST))
    with pytest.raises(RequestError):
        SamplingParams(max_tokens=5, pooling=PoolingParams(Pooling.LAST))
