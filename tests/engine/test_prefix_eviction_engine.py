"""`--prefix-eviction` on the real engine (tiny model): a hot prefix survives a burst of one-off prompts under gdsf
that LRU lets evict it, and the tokens generated are the same under either policy."""

from __future__ import annotations

import random

import pytest

from engine import LLM, SamplingParams
from engine.prefix_eviction import PrefixEviction
from engine.server.cli import _parser, build_configs

BLOCK_SIZE = 16
HOT_BLOCKS = 4
GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)


def _prompts(vocab_size: int) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """(hot prompts: one shared 4-block prefix and a 1-block suffix each; one-off prompts of 4 blocks; the prefix)"""
    rng = random.Random(0)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(5, vocab_size) for _ in range(n)]

    hot = tokens(HOT_BLOCKS * BLOCK_SIZE)
    return [hot + tokens(BLOCK_SIZE) for _ in range(4)], [tokens(HOT_BLOCKS * BLOCK_SIZE) for _ in range(7)], hot


def _replay(model_dir: str, eviction: PrefixEviction) -> tuple[list[list[int]], int, LLM]:
    """Three requests use the hot prefix, seven one-off prompts follow, then the hot prefix again: every output's
    tokens, and the prompt tokens the last request found cached."""
    # 24 blocks: the seven one-offs (5 blocks each with their output) cycle through the pool several times over.
    llm = LLM(
        model_dir, num_kv_blocks=24, max_num_seqs=1, block_size=BLOCK_SIZE, prefix_eviction=eviction.value, seed=0
    )
    assert llm.engine.pool.eviction is eviction
    hot_prompts, one_offs, _ = _prompts(llm.engine.spec.vocab_size)
    outputs = []
    for prompt in [*hot_prompts[:3], *one_offs]:  # one at a time: each request ends before the next arrives
        outputs.append(llm.generate([prompt], GREEDY)[0].outputs[0].token_ids)
    before = llm.engine.stats().prefix_cache_hits_total
    outputs.append(llm.generate([hot_prompts[3]], GREEDY)[0].outputs[0].token_ids)
    return outputs, llm.engine.stats().prefix_cache_hits_total - before, llm


@pytest.fixture(scope="module")
def replays(tiny_model_dir):
    return {eviction: _replay(tiny_model_dir, eviction) for eviction in PrefixEviction}


def test_a_hot_prefix_survives_one_off_prompts_under_gdsf_not_lru(replays):
    _, gdsf_hit_tokens, _ = replays[PrefixEviction.GDSF]
    _, lru_hit_tokens, _ = replays[PrefixEviction.LRU]
    assert gdsf_hit_tokens == HOT_BLOCKS * BLOCK_SIZE
    assert lru_hit_tokens == 0


def test_outputs_are_token_exact_under_either_policy(replays):
    gdsf_outputs, _, _ = replays[PrefixEviction.GDSF]
    lru_outputs, _, _ = replays[PrefixEviction.LRU]
    assert all(len(tokens) == GREEDY.max_tokens for tokens in gdsf_outputs)
    assert gdsf_outputs == lru_outputs


@pytest.mark.parametrize("eviction", list(PrefixEviction))
def test_no_block_leaks_and_the_free_set_is_the_unreferenced_blocks(replays, eviction):
    pool = replays[eviction][2].engine.pool
    assert pool.num_free_blocks == pool.num_blocks
    assert sorted(block.block_id for block in pool.free_queue) == list(range(pool.num_blocks))
    assert all(block.ref_cnt == 0 for block in pool.blocks)
    assert pool.reset_prefix_cache()
    assert not pool.cached and pool.num_free_blocks == pool.num_blocks
    assert len(pool.free_queue.policy) == 0, "a reset leaves nothing for the policy to evict"


def test_the_flag_reaches_the_engine_config():
    assert build_configs(_parser().parse_args(["--model", "/m"]))[0].prefix_eviction == "gdsf"
    config, _ = build_configs(_parser().parse_args(["--model", "/m", "--prefix-eviction", "lru"]))
    assert config.prefix_eviction == "lru"
    with pytest.raises(ValueError, match="prefix_eviction"):
        build_configs(_parser().parse_args(["--model", "/m", "--prefix-eviction", "fifo"]))
