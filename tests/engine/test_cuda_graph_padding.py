"""The CUDA-graph decode path's padding (static buffers, batches padded up to a captured size, padding rows that
write nothing) gives the same greedy tokens as the plain path. Graph capture itself needs a GPU; here the padded
path runs eagerly on CPU, which is everything the graphs replay."""

from __future__ import annotations

from engine import LLM, SamplingParams
from engine.cuda_graphs import DecodeGraphRunner
from tests.engine.conftest import NUM_REFERENCE_TOKENS


def test_padded_decode_path_matches(arch_model_dirs, hf_references):
    prompts, expected = hf_references["llama"]
    llm = LLM(arch_model_dirs["llama"], max_num_seqs=16)
    engine = llm.engine
    runner = engine.runner
    runner.graph_runner = DecodeGraphRunner(
        runner.model, engine.kv_cache, -(-engine.max_model_len // engine.block_size), (1, 4, 8, 32), engine.device,
        use_graphs=False,
    )  # fmt: skip
    calls = []
    original = runner.graph_runner.run
    runner.graph_runner.run = lambda inputs: calls.append(inputs.meta.num_decodes) or original(inputs)
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=NUM_REFERENCE_TOKENS, ignore_eos=True))
    assert [o.outputs[0].token_ids for o in outs] == expected
    assert calls and any(n not in (1, 4, 8, 32) for n in calls), "no step needed padding"
