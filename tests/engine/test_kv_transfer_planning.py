"""The engine thread's bookkeeping of KV transfers (engine/kv_transfer/): which blocks a decode replica reads into,
which it already holds, and that every reference taken is given back, whatever happens to the request."""

from __future__ import annotations

import pytest

from engine.block_pool import BlockPool
from engine.errors import RequestError
from engine.kv_transfer.handoffs import Handoffs
from engine.kv_transfer.layout import KVLayout, runs
from engine.kv_transfer.params import RemotePrefill
from engine.kv_transfer.planner import PullRefusal, plan_pull
from engine.kv_transfer.pull_plan import PullPlan
from engine.sampling_params import SamplingParams
from sluicegate.block_hash import next_block_hash, root_hash

BS = 4


def chain(tokens: list[int], num_blocks: int, salt: str = "", block_size: int = BS) -> list[int]:
    hashes, parent = [], root_hash(salt)
    for i in range(num_blocks):
        parent = next_block_hash(parent, tokens[i * block_size : (i + 1) * block_size])
        hashes.append(parent)
    return hashes


def remote_for(tokens: list[int], num_blocks: int, salt: str = "", block_size: int = BS) -> RemotePrefill:
    return RemotePrefill("e" * 32, "127.0.0.1", 1, tuple(range(100, 100 + num_blocks)), "r", num_blocks * block_size,
                         chain(tokens, num_blocks, salt, block_size)[-1])  # fmt: skip


def free_state(pool: BlockPool) -> tuple[int, list[int]]:
    return pool.num_free_blocks, [b.ref_cnt for b in pool.blocks]


PROMPT = list(range(1, 19))  # 18 tokens: 4 full blocks a decode replica can use ((18 - 1) // 4)


def test_a_plan_reads_only_what_the_cache_lacks_and_holds_what_it_has():
    pool = BlockPool(16, enable_caching=True)
    cached = pool.allocate(2)
    hashes = chain(PROMPT, 2)
    pool.cache_blocks(cached, hashes, [tuple(PROMPT[0:4]), tuple(PROMPT[4:8])])
    pool.free(cached)  # cached but unreferenced: evictable until the plan takes a reference
    plan = plan_pull(pool, BS, PROMPT, "", remote_for(PROMPT, 4), reserve_blocks=0)
    assert isinstance(plan, PullPlan)
    assert plan.first_block == 2 and len(plan.read_blocks) == 2 and plan.num_blocks == 4
    assert plan.hashes == chain(PROMPT, 4)[2:]
    assert all(b.ref_cnt == 1 for b in plan.held) and plan.held[:2] == cached
    assert pool.num_free_blocks == 16 - 4


def test_another_prompt_or_salt_is_a_mismatch_and_takes_nothing():
    pool = BlockPool(16, enable_caching=True)
    before = free_state(pool)
    other = [t + 1 for t in PROMPT]
    assert plan_pull(pool, BS, PROMPT, "", remote_for(other, 4), 0) is PullRefusal.MISMATCH
    assert plan_pull(pool, BS, PROMPT, "b", remote_for(PROMPT, 4, salt="a"), 0) is PullRefusal.MISMATCH
    # More blocks handed over than this prompt has to give (another, longer prompt): refused too.
    assert plan_pull(pool, BS, PROMPT[:9], "", remote_for(PROMPT, 4), 0) is PullRefusal.MISMATCH
    assert free_state(pool) == before


def test_too_little_room_refuses_without_taking_anything():
    pool = BlockPool(5, enable_caching=True)
    before = free_state(pool)
    assert plan_pull(pool, BS, PROMPT, "", remote_for(PROMPT, 4), reserve_blocks=2) is PullRefusal.NO_ROOM
    assert free_state(pool) == before


def test_handoffs_hold_until_read_or_their_deadline():
    pool = BlockPool(8, enable_caching=True)
    handoffs = Handoffs(pool, timeout_s=10.0)
    a, b = pool.allocate(2), pool.allocate(1)
    handoffs.hold("a", a, now_s=0.0)
    handoffs.hold("b", b, now_s=5.0)
    pool.free(a + b)  # the sequences finished: only the holds keep the blocks
    assert pool.num_free_blocks == 5
    assert handoffs.release("a") and not handoffs.release("a")
    assert pool.num_free_blocks == 7
    assert handoffs.expire(now_s=14.9) == 0 and handoffs.expire(now_s=15.0) == 1
    assert pool.num_free_blocks == 8 and len(handoffs) == 0


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from tests.engine.server.live import make_engine

    return make_engine(tiny_model_dir, kv_role="decode", num_kv_blocks=64, block_size=16)


def run(engine, request_id: str) -> list[int]:
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished and output.request_id == request_id:
                return output.outputs[0].token_ids
    raise AssertionError("the request never finished")


def test_the_engine_takes_read_blocks_as_a_prefix_hit_and_gives_every_reference_back(engine):
    """Bookkeeping only (that the read KV is right is tests/engine/server/test_disaggregated.py's): read blocks join
    the prefix cache under the prompt's hashes, the request is scheduled with them as a hit, and afterwards the pool
    is as free as before."""
    prompt = [(7 * i) % 500 + 1 for i in range(53)]  # 3 full blocks usable
    free_before = engine.pool.num_free_blocks
    plan = engine.plan_kv_pull(prompt, "", remote_for(prompt, 3, block_size=16))
    assert isinstance(plan, PullPlan) and plan.first_block == 0 and len(plan.read_blocks) == 3
    engine.add_request("decode", prompt, SamplingParams(max_tokens=4, temperature=0), pulled=plan)
    assert [engine.pool.cached[h] for h in plan.hashes] == plan.read_blocks
    request = engine.requests["decode"]
    run(engine, "decode")
    assert request.num_cached_tokens == 48
    assert engine.requests == {} and engine.pool.num_free_blocks == free_before
    engine.reset_prefix_cache()


def test_a_request_aborted_before_it_ran_gives_its_read_blocks_back(engine):
    prompt = [(11 * i) % 500 + 1 for i in range(40)]
    free_before = engine.pool.num_free_blocks
    plan = engine.plan_kv_pull(prompt, "", remote_for(prompt, 2, block_size=16))
    assert isinstance(plan, PullPlan)
    engine.add_request("gone", prompt, SamplingParams(max_tokens=4), pulled=plan)
    engine.abort_request("gone")
    assert engine.pool.num_free_blocks == free_before

    second = engine.plan_kv_pull(prompt, "", remote_for(prompt, 2, block_size=16))
    assert isinstance(second, PullPlan)
    engine.add_request("dup", prompt, SamplingParams(max_tokens=4))
    with pytest.raises(RequestError, match="request id"):  # refused: the plan it came with goes back
        engine.add_request("dup", prompt, SamplingParams(max_tokens=4), pulled=second)
    engine.abort_request("dup")
    assert engine.pool.num_free_blocks == free_before


def test_blocks_consecutive_on_both_sides_move_as_one_range_per_region():
    local_firsts, remote_firsts, lengths = runs([3, 4, 5, 9, 10, 11], [7, 8, 9, 2, 3, 5])
    assert local_firsts.tolist() == [3, 9, 11] and remote_firsts.tolist() == [7, 2, 5]  # 11 -> 5 breaks remotely
    assert lengths.tolist() == [3, 2, 1]
    layout = KVLayout(((1000, 800), (5000, 800)), 10, 80, 4, "float32", "DRAM", 0)
    rows = layout.descriptors(local_firsts, lengths)
    assert rows.tolist() == [
        [1000 + 3 * 80, 240, 0], [1000 + 9 * 80, 160, 0], [1000 + 11 * 80, 80, 0],
        [5000 + 3 * 80, 240, 0], [5000 + 9 * 80, 160, 0], [5000 + 11 * 80, 80, 0],
    ]  # fmt: skip
