"""The step's short paths (issue 21) give what the long ones gave:

- decode-only steps (ModelRunner._prepare_decodes), which keep the block tables, constant regions, buffer views and
  attention metadata of the step before while its batch and tables are unchanged, equal inputs built from scratch,
  through runs, block boundaries, replaced tables, departures and returns, reordering, and other steps in between;
- KVCacheManager.commit_scheduled leaves sequences and the pool as commit() one sequence at a time;
- the RequestOutputs, built positionally, stream exactly what the sequences hold.
"""

from __future__ import annotations

import random

import torch

from engine import LLM, SamplingParams
from engine.block_pool import BlockPool, KVBlock
from engine.input_batch import InputBatch
from engine.kv_cache_manager import KVCacheManager
from engine.model_runner import ModelRunner
from engine.sequence import Request, Sequence
from tests.engine.test_input_batch import BLOCK_SIZE, FakeSeq, check_step, grow


def _decode_step(runner, seqs, next_block):
    """Every sequence computes its pending token; then it has one more (as after sampling)."""
    scheduled = []
    for seq in seqs:
        assert seq.num_tokens - seq.num_computed_tokens == 1
        grow(seq, 1, next_block)
        scheduled.append((seq, 1))
    inputs = check_step(runner, scheduled)
    assert inputs.every_row_sampled and inputs.meta.num_prefills == 0
    for seq in seqs:
        seq.num_computed_tokens += 1
        seq.token_ids.append(seq.num_tokens % 97)
    return inputs


def _prefill(runner, seq, next_block, pooled=False):
    n = seq.num_tokens - seq.num_computed_tokens
    grow(seq, n, next_block)
    seq.pooling = object() if pooled else None  # a pooled prompt takes the full path (its rows go to pooling)
    inputs = check_step(runner, [(seq, n)])
    seq.pooling = None
    seq.num_computed_tokens += n
    seq.token_ids.append(7)
    return inputs


def test_decode_runs_match_inputs_built_from_lists():
    runner = ModelRunner(None, None, BLOCK_SIZE, torch.device("cpu"), InputBatch(max_num_rows=2, max_blocks_per_seq=2))
    next_block = [1]
    seqs = [FakeSeq(i, list(range(10, 13 + i))) for i in range(4)]
    for seq in seqs:
        _prefill(runner, seq, next_block)
    for step in range(30):  # a steady run: the same batch, block boundaries every BLOCK_SIZE steps
        first = _decode_step(runner, seqs, next_block)
        if step == 5:
            again = _decode_step(runner, seqs, next_block)
            if again.meta.decode_block_tables.shape == first.meta.decode_block_tables.shape:
                assert again.meta is first.meta  # kept: same layout, same batch, same tables
    seqs[1].block_table = [KVBlock(500 + i) for i in range(len(seqs[1].block_table))]  # replaced, same length
    _decode_step(runner, seqs, next_block)
    _decode_step(runner, seqs[:2] + seqs[3:], next_block)  # seqs[2] leaves (its row is given back)
    _decode_step(runner, seqs, next_block)  # and returns, its token still pending
    _decode_step(runner, seqs[::-1], next_block)  # the same rows in another order
    _decode_step(runner, seqs[::-1], next_block)
    table = seqs[0].block_table
    seqs[0].block_table = table[:-1] + [KVBlock(900)]  # copy-on-write of the last block
    _decode_step(runner, seqs[::-1], next_block)


def test_a_full_step_of_a_decode_steps_shape_in_between():
    """A pooled one-token prompt is laid out as a one-sequence decode step, but through the full path: the decode
    step after it must not take that step's block table for its own."""
    runner = ModelRunner(None, None, BLOCK_SIZE, torch.device("cpu"), InputBatch(max_num_rows=4, max_blocks_per_seq=4))
    next_block = [1]
    a = FakeSeq(0, [3])
    _prefill(runner, a, next_block)
    _decode_step(runner, [a], next_block)
    _decode_step(runner, [a], next_block)
    pooled = FakeSeq(1, [5])
    inputs = _prefill(runner, pooled, next_block, pooled=True)
    assert len(inputs.pool_spans) == 1 and inputs.meta.decode_block_tables.shape == (1, 1)
    _decode_step(runner, [a], next_block)
    _decode_step(runner, [pooled], next_block)
    _decode_step(runner, [a], next_block)


def _sequences(rng: random.Random, count: int) -> list[Sequence]:
    request = Request("r", [1, 2, 3], SamplingParams(), cache_salt="salt")
    seqs: list[Sequence] = []
    for i in range(count):
        tokens = [rng.randrange(50) for _ in range(rng.randrange(1, 40))]
        if i % 3 == 1:
            tokens[:12] = seqs[i - 1].token_ids[:12]  # a shared head: blocks already cached by another sequence
        seqs.append(Sequence(request, i, tokens, None, None))  # type: ignore[arg-type]  # no detokenizing here
    return seqs


def _state(kv: KVCacheManager, seqs: list[Sequence]):
    pool = kv.pool
    return (
        [
            (s.num_computed_tokens, [b.block_id for b in s.block_table], s.block_hashes, s.num_cached_blocks)
            for s in seqs
        ],
        pool.num_free_blocks,
        sorted((h, b.block_id) for h, b in pool.cached.items()),
        [b.ref_cnt for b in pool.blocks],
        pool.events,
    )


def test_commit_scheduled_equals_commit_per_sequence():
    for seed in range(5):
        replicas = []
        for _ in range(2):
            rng = random.Random(seed)
            kv = KVCacheManager(BlockPool(200, enable_caching=True), None, 4, 0)  # commit reads no KV cache
            seqs = _sequences(rng, 12)
            replicas.append((kv, seqs, rng))
        for _ in range(12):
            steps = []
            for kv, seqs, rng in replicas:
                scheduled, skip = [], set()
                for seq in seqs:
                    left = seq.num_tokens - seq.num_computed_tokens
                    if rng.random() < 0.2:
                        continue  # not scheduled this step
                    n = rng.randrange(1, left + 1)
                    extra = rng.choice([0, 0, 3, 6])  # slots past the tokens (drafts'), which commit trims
                    assert kv.allocate_slots(seq, n + extra)
                    scheduled.append((seq, n))
                    if rng.random() < 0.15:
                        skip.add(seq.seq_id)
                steps.append((scheduled, skip))
            (kv_a, seqs_a, _), (kv_b, seqs_b, _) = replicas
            for seq, n in steps[0][0]:
                if seq.seq_id not in steps[0][1]:
                    kv_a.commit(seq, n)
            kv_b.commit_scheduled(steps[1][0], skip=steps[1][1])
            assert _state(kv_a, seqs_a) == _state(kv_b, seqs_b)
            for (kv, _, rng), (scheduled, skip) in zip(replicas, steps):
                for seq, _ in scheduled:
                    if seq.seq_id in skip:  # verification: some tokens, as the speculator commits them
                        kv.commit(seq, 1)
                    if seq.num_computed_tokens == seq.num_tokens:
                        seq.append_token(rng.randrange(50))


def test_step_outputs_stream_what_the_sequences_hold(tiny_model_dir):
    llm = LLM(tiny_model_dir, max_num_seqs=8, seed=3)
    engine = llm.engine
    text = llm.tokenizer.decode(list(range(40, 60)))
    params = {
        "one": SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True),
        "two": SamplingParams(n=2, temperature=1.0, seed=5, max_tokens=10, logprobs=2, ignore_eos=True),
        "stop": SamplingParams(temperature=0.8, seed=1, max_tokens=30, stop=[text[3:5], " e"], ignore_eos=True),
    }
    prompt = list(range(30, 70))
    for request_id, p in params.items():
        engine.add_request(request_id, prompt, p)
    streamed: dict[str, dict[int, list]] = {r: {} for r in params}
    finals = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            assert out.prompt_token_ids == prompt and out.embedding is None and out.kv_handoff is None
            assert out.first_token_time is not None and out.first_scheduled_time is not None
            assert out.arrival_time <= out.first_scheduled_time <= out.first_token_time
            assert (out.finished_time is not None) == out.finished
            assert [c.index for c in out.outputs] == list(range(len(out.outputs)))
            for c in out.outputs:
                text_so_far, ids, logprobs = streamed[out.request_id].setdefault(c.index, ["", [], []])
                streamed[out.request_id][c.index] = [
                    text_so_far + c.delta_text,
                    ids + c.delta_token_ids,
                    logprobs + (c.delta_logprobs or []),
                ]
                assert c.finished == (c.finish_reason is not None)
            if out.finished:
                finals[out.request_id] = out
    assert set(finals) == set(params)
    for request_id, out in finals.items():
        assert len(out.outputs) == params[request_id].n
        assert out.finished_time is not None and out.finished_time >= out.first_token_time
        for c in out.outputs:
            text_so_far, ids, logprobs = streamed[request_id][c.index]
            assert (text_so_far, ids) == (c.text, c.token_ids)
            assert c.finish_reason in ("stop", "length")
            if params[request_id].logprobs is None:
                assert c.logprobs is None and c.delta_logprobs is None
            else:
                assert c.logprobs is not None and logprobs == c.logprobs and len(logprobs) == len(ids)
                assert [lp.token_id for lp in logprobs] == ids
            if c.finish_reason == "stop":
                assert c.stop_reason in params[request_id].stop and c.stop_reason not in c.text
            else:
                assert c.stop_reason is None and len(ids) == params[request_id].max_tokens
    # A second request on the same prompt is a prefix-cache hit, reported on its outputs.
    engine.add_request("again", prompt, params["one"])
    outs = [o for _ in range(3) for o in engine.step()]
    assert outs[0].num_cached_tokens > 0 and outs[0].num_cached_tokens == engine.requests["again"].num_cached_tokens
    engine.abort_request("again")
