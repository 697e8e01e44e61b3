"""Block-pool invariants under random admit / abort / finish / preempt sequences (hypothesis), on the real
engine with the tiny model: no leaked blocks, refcounts never negative and equal to the live references, the free
queue holds exactly the unreferenced blocks, and every cached hash maps to a block holding exactly the tokens that
hash was computed from."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import LLM, SamplingParams
from sluicegate.block_hash import next_block_hash, root_hash

BLOCK_SIZE = 16

# A few shared prefixes so that prompts hit each other's cached blocks.
PREFIXES = [[7 + i] * 40 for i in range(3)]


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    # 20 blocks: small enough that admissions, growth and forks force preemption and eviction.
    return LLM(tiny_model_dir, num_kv_blocks=20, max_num_seqs=6, max_num_batched_tokens=48)


def check_invariants(engine, expected_chains: dict[int, tuple[int, tuple[int, ...]]]) -> None:
    pool = engine.pool
    live_refs = Counter()
    for request in engine.requests.values():
        for seq in request.seqs:
            if not seq.is_finished:
                live_refs.update(b.block_id for b in seq.block_table)
    free_ids = {b.block_id for b in pool.free_queue}
    assert len(free_ids) == pool.free_queue.num_free_blocks
    for block in pool.blocks:
        assert block.ref_cnt >= 0
        assert block.ref_cnt == live_refs[block.block_id], f"block {block.block_id}: refcount vs live references"
        assert (block.block_id in free_ids) == (block.ref_cnt == 0)
    for block_hash, block in pool.cached.items():
        assert block.block_hash == block_hash
        parent_and_tokens = expected_chains.get(block_hash)
        assert parent_and_tokens is not None, "cached hash that no sequence ever produced"
        assert block.token_ids == parent_and_tokens[1]


def record_chains(token_ids: list[int], chains: dict) -> None:
    """Every (hash -> tokens) a sequence with these tokens can register, computed independently of the engine."""
    parent = root_hash("")
    for start in range(0, len(token_ids) - BLOCK_SIZE + 1, BLOCK_SIZE):
        tokens = tuple(token_ids[start : start + BLOCK_SIZE])
        parent_next = next_block_hash(parent, tokens)
        chains[parent_next] = (parent, tokens)
        parent = parent_next


def step_and_record(engine, chains: dict) -> None:
    for out in engine.step():
        for choice in out.outputs:
            record_chains(out.prompt_token_ids + choice.token_ids, chains)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 2), st.integers(0, 30), st.integers(1, 3), st.integers(1, 24)),
        st.tuples(st.just("abort"), st.integers(0, 50)),
        st.tuples(st.just("step"), st.integers(1, 4)),
    ),
    min_size=5,
    max_size=40,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
def test_invariants_hold_under_random_operations(llm, ops):
    engine = llm.engine
    for request_id in list(engine.requests):  # start from an empty pool: examples must not see each other
        engine.abort_request(request_id)
    assert engine.reset_prefix_cache()
    chains: dict = {}
    ids = []
    for op in ops:
        if op[0] == "add":
            _, prefix, extra, n, max_tokens = op
            prompt = PREFIXES[prefix] + [100 + (len(ids) * 7 + j) % 300 for j in range(extra)]
            request_id = f"r{len(ids)}-{id(ops)}"
            params = SamplingParams(n=n, temperature=1.0, seed=len(ids), max_tokens=max_tokens, ignore_eos=True)
            engine.add_request(request_id, prompt, params)
            ids.append(request_id)
        elif op[0] == "abort" and ids:
            engine.abort_request(ids[op[1] % len(ids)])
        else:
            for _ in range(op[1]):
                step_and_record(engine, chains)
        for request in engine.requests.values():
            for seq in request.seqs:
                record_chains(seq.token_ids, chains)
        check_invariants(engine, chains)
    while engine.has_unfinished_requests():  # drain: everything finishes, nothing leaks
        step_and_record(engine, chains)
    check_invariants(engine, chains)
    assert engine.pool.num_free_blocks == engine.pool.num_blocks
