"""Speculative decoding in the engine: greedy output is token for token the output without it, for both
proposers, with prefix caching, chunked prefill and preemption in play; seeded sampling with speculation is
reproducible; rejected drafts leave no blocks or cache entries behind."""

from __future__ import annotations

import pytest

from engine import LLM, SamplingParams
from tests.engine.conftest import mixed_prompts

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
MODES = {
    "prefix-cache": {},
    "chunked-prefill": {"max_num_batched_tokens": 40, "max_num_seqs": 6},
    "preempt-recompute": {"num_kv_blocks": 40, "max_num_seqs": 16},
    "preempt-swap": {"num_kv_blocks": 40, "max_num_seqs": 16, "preemption_mode": "swap"},
}


def copy_heavy_prompts() -> list[list[int]]:
    """Prompts that repeat themselves, so prompt lookup finds continuations."""
    return [p + p[:20] + p for p in mixed_prompts(512)]


@pytest.fixture(scope="module")
def reference(arch_model_dirs):
    prompts = copy_heavy_prompts()
    llm = LLM(arch_model_dirs["llama"], enable_prefix_caching=False)
    return prompts, [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY)]


def _proposers(arch_model_dirs) -> dict[str, dict]:
    return {
        "ngram": {"speculative_method": "ngram"},
        # the target drafting for itself accepts (almost) everything: exercises long accepted runs and bonus tokens
        "draft-self": {"speculative_method": "draft", "speculative_model": arch_model_dirs["llama"]},
        # an unrelated model with the same tokenizer rejects most drafts: exercises rollback
        "draft-other": {"speculative_method": "draft", "speculative_model": arch_model_dirs["mistral"]},
    }


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("proposer", ["ngram", "draft-self", "draft-other"])
def test_greedy_output_unchanged_by_speculation(proposer, mode, arch_model_dirs, reference):
    prompts, expected = reference
    config = {**_proposers(arch_model_dirs)[proposer], **MODES[mode], "speculative_adaptive": False}
    llm = LLM(arch_model_dirs["llama"], **config)
    for _ in range(2):  # the second round runs from the prefix cache
        got = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY)]
        bad = [i for i, (g, e) in enumerate(zip(got, expected)) if g != e]
        assert not bad, f"{proposer}/{mode}: prompts {bad} differ"
    engine = llm.engine
    stats = engine.speculator.stats
    assert stats.num_drafts_total > 0 and stats.num_draft_tokens_total >= stats.num_accepted_tokens_total
    if proposer == "draft-self":
        assert stats.num_accepted_tokens_total > 0.9 * stats.num_draft_tokens_total
    if proposer == "draft-other":
        assert stats.num_accepted_tokens_total < stats.num_draft_tokens_total
    if mode.startswith("preempt"):
        assert engine.stats().num_preemptions_total > 0
    assert engine.stats().num_blocks_free == engine.stats().num_blocks_total


def test_seeded_sampling_with_speculation_is_reproducible(arch_model_dirs):
    prompts = copy_heavy_prompts()[:8]
    params = [SamplingParams(temperature=0.8, seed=100 + i, max_tokens=20, ignore_eos=True) for i in range(8)]
    config = {"speculative_method": "ngram"}
    first = [o.outputs[0].token_ids for o in LLM(arch_model_dirs["llama"], **config).generate(prompts, params)]
    again = LLM(arch_model_dirs["llama"], **config)
    second = [o.outputs[0].token_ids for o in again.generate(prompts, params)]
    assert first == second
    # ... and a seeded request gives the same tokens alone as in that batch.
    alone = again.generate([prompts[3]], params[3])[0].outputs[0].token_ids
    assert alone == first[3]
    assert again.engine.speculator.stats.num_drafts_total > 0


def test_adaptive_controller_turns_speculation_off_when_drafts_fail(arch_model_dirs):
    """Random prompts give prompt lookup nothing useful: the controller should stop drafting for most steps."""
    import random

    rng = random.Random(0)
    prompts = [[rng.randrange(5, 512) for _ in range(40)] for _ in range(6)]
    llm = LLM(arch_model_dirs["llama"], speculative_method="draft", speculative_model=arch_model_dirs["mistral"])
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True))
    steps_with_drafts = llm.engine.speculator.stats.num_drafts_total / len(prompts)
    assert all(len(o.outputs[0].token_ids) == 60 for o in outs)
    assert steps_with_drafts < 30, f"speculated in {steps_with_drafts:.0f} of ~60 steps despite low acceptance"


@pytest.mark.parametrize("prompt_len", [1, 17, 40])
def test_n_greater_than_one_with_speculation(prompt_len, arch_model_dirs):
    """A prompt whose first step is already a one-token "decode" (a 1-token prompt, or 16 of 17 tokens cached)
    must still fork its siblings; every greedy sibling then equals the plain greedy output."""
    model_dir = arch_model_dirs["llama"]
    prompt = [7 + (i % 5) for i in range(prompt_len)]
    plain = LLM(model_dir).generate([prompt], GREEDY)[0].outputs[0].token_ids
    llm = LLM(model_dir, speculative_method="draft", speculative_model=model_dir, speculative_adaptive=False)
    llm.generate([prompt[:16]], SamplingParams(temperature=0.0, max_tokens=1))  # cache the first block
    params = SamplingParams(n=3, temperature=0.0, max_tokens=24, ignore_eos=True)
    out = llm.generate([prompt], params)[0]
    assert [c.token_ids for c in out.outputs] == [plain] * 3
    assert llm.engine.stats().num_blocks_free == llm.engine.stats().num_blocks_total
