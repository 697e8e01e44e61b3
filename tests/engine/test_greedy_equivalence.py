"""Greedy output token for token equal to transformers' generate (fp32), for every architecture, under every
engine mode that changes how the KV cache is filled: prefix caching on/off, chunked prefill, preemption by
recompute and by swap, n > 1 with copy-on-write forks, the batch-invariant kernels, and outputs processed while the
next step runs (async_output_processing, with preemption)."""

from __future__ import annotations

import pytest

from engine import LLM, SamplingParams
from tests.engine.conftest import ARCH_VARIANTS, NUM_REFERENCE_TOKENS

MODES = {
    "default": {},
    "no-prefix-cache": {"enable_prefix_caching": False},
    "chunked-prefill": {"max_num_batched_tokens": 24, "max_num_seqs": 6},
    "preempt-recompute": {"num_kv_blocks": 24, "max_num_seqs": 16},
    "preempt-swap": {"num_kv_blocks": 24, "max_num_seqs": 16, "preemption_mode": "swap"},
    "batch-invariant": {"batch_invariant": True, "max_num_batched_tokens": 24, "max_num_seqs": 6},
    "async-output": {"async_output_processing": True, "num_kv_blocks": 24, "max_num_seqs": 16},
}
GREEDY = SamplingParams(temperature=0.0, max_tokens=NUM_REFERENCE_TOKENS, ignore_eos=True)


def _generate(model_dir: str, prompts, params=GREEDY, **mode):
    llm = LLM(model_dir, **mode)
    return llm, llm.generate(prompts, params)


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("arch", sorted(ARCH_VARIANTS))
def test_greedy_matches_transformers(arch, mode, arch_model_dirs, hf_references):
    prompts, expected = hf_references[arch]
    llm = LLM(arch_model_dirs[arch], **MODES[mode])
    # Twice on one engine: the second round runs from the prefix cache the first round filled.
    for _ in range(2):
        got = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY)]
        bad = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
        assert not bad, f"{arch}/{mode}: prompts {bad} differ, e.g. {got[bad[0]]} vs {expected[bad[0]]}"
    stats = llm.engine.stats()
    # The mode really exercised what it names.
    if mode == "default":
        assert stats.prefix_cache_hits_total > 0
    if mode == "no-prefix-cache":
        assert stats.prefix_cache_hits_total == 0
    if mode in ("chunked-prefill", "batch-invariant"):
        assert stats.num_chunked_prefill_steps_total > 0
    if mode.startswith("preempt") or mode == "async-output":
        assert stats.num_preemptions_total > 0
    assert llm.engine.overlap_outputs == (mode == "async-output")
    if mode == "preempt-swap":
        assert stats.num_swapped_out_total > 0 and stats.num_swapped_in_total > 0
    assert stats.num_blocks_free == stats.num_blocks_total, "blocks leaked"


@pytest.mark.parametrize("mode", ["default", "no-prefix-cache", "preempt-recompute", "async-output"])
def test_n_greater_than_one_greedy_choices_all_match(mode, arch_model_dirs, hf_references):
    prompts, expected = hf_references["llama"]
    params = SamplingParams(n=3, temperature=0.0, max_tokens=NUM_REFERENCE_TOKENS, ignore_eos=True)
    llm, outs = _generate(arch_model_dirs["llama"], prompts, params, **MODES[mode])
    for out, exp in zip(outs, expected):
        assert [c.index for c in out.outputs] == [0, 1, 2]
        for choice in out.outputs:
            assert choice.token_ids == exp
    assert llm.engine.stats().num_blocks_free == llm.engine.stats().num_blocks_total


def test_forked_siblings_copy_on_write_keep_their_own_kv(arch_model_dirs):
    """Sampled siblings diverge right after the shared partial block; each must continue from its own tokens.
    Re-running each sibling's full sequence greedily from scratch must reproduce the sibling's greedy tail."""
    model_dir = arch_model_dirs["llama"]
    llm = LLM(model_dir)
    prompt = list(range(10, 30))  # 20 tokens: the second block is partly filled and shared after the fork
    params = SamplingParams(n=4, temperature=1.0, seed=7, max_tokens=3, ignore_eos=True)
    out = llm.generate([prompt], params)[0]
    heads = [c.token_ids for c in out.outputs]
    assert len({tuple(h) for h in heads}) > 1, "siblings should diverge under sampling"
    greedy_tail = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    # Continue each sibling greedily inside one engine (shared prefix, CoW), and separately from scratch.
    together = llm.generate([prompt + h for h in heads], greedy_tail)
    for head, joint in zip(heads, together):
        alone = LLM(model_dir, enable_prefix_caching=False).generate([prompt + head], greedy_tail)[0]
        assert joint.outputs[0].token_ids == alone.outputs[0].token_ids
