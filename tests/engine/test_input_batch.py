"""The persistent batch and the packed step inputs: after any sequence of appends, replacements, departures and
returns, every step's inputs equal those built from scratch from the sequences' Python lists."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
import torch

from engine.block_pool import KVBlock
from engine.input_batch import InputBatch
from engine.model_runner import ModelRunner

BLOCK_SIZE = 4


@dataclass
class FakeSeq:
    """What the model runner reads of a Sequence."""

    seq_id: int
    token_ids: list[int]
    num_computed_tokens: int = 0
    block_table: list = field(default_factory=list)
    pooling: None = None  # not an embedding request

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


def expected_inputs(ordered, drafts):
    """The step's inputs built the obvious way, one Python list at a time."""
    input_ids, positions, slots, seq_lens, starts_q, logit_rows, tables = [], [], [], [], [0], [], []
    num_decodes = sum(1 for s, n in ordered if n == 1 and s.seq_id not in drafts)
    for seq, n in ordered:
        start = seq.num_computed_tokens
        draft = drafts.get(seq.seq_id, [])
        ids = seq.token_ids[start : start + n] + draft
        for offset, _ in enumerate(ids):
            pos = start + offset
            positions.append(pos)
            slots.append(seq.block_table[pos // BLOCK_SIZE].block_id * BLOCK_SIZE + pos % BLOCK_SIZE)
        input_ids += ids
        seq_lens.append(start + len(ids))
        if len(tables) >= num_decodes:
            starts_q.append(starts_q[-1] + len(ids))
        if start + n == seq.num_tokens:
            logit_rows += range(len(input_ids) - 1 - len(draft), len(input_ids))
        tables.append([b.block_id for b in seq.block_table])
    return input_ids, positions, slots, seq_lens, starts_q, logit_rows, tables, num_decodes


def check_step(runner, scheduled, drafts=None):
    drafts = drafts or {}
    decodes = [(s, n) for s, n in scheduled if n == 1 and s.seq_id not in drafts]
    ordered = decodes + [(s, n) for s, n in scheduled if n != 1 or s.seq_id in drafts]
    inputs = runner.prepare(scheduled, drafts)
    ids, positions, slots, seq_lens, starts_q, logit_rows, tables, nd = expected_inputs(ordered, drafts)
    meta = inputs.meta
    assert inputs.input_ids.tolist() == ids
    assert inputs.positions.tolist() == positions
    assert meta.slot_mapping.tolist() == slots
    assert meta.num_decodes == nd and meta.num_prefills == len(ordered) - nd
    assert meta.decode_seq_lens.tolist() + meta.prefill_seq_lens.tolist() == seq_lens
    assert meta.prefill_query_start_loc.tolist() == starts_q
    assert inputs.logit_indices.tolist() == logit_rows
    got_tables = torch.cat([meta.decode_block_tables, meta.prefill_block_tables]).tolist()
    for got, table, seq_len in zip(got_tables, tables, seq_lens):
        used = -(-seq_len // BLOCK_SIZE)  # entries past the context may be anything (kernels stop at seq_lens)
        assert got[:used] == table[:used]
    assert meta.decode_block_tables.dtype == torch.int32 and meta.slot_mapping.dtype == torch.int64
    return inputs


def grow(seq: FakeSeq, num_new: int, next_block: list[int]) -> None:
    """Append blocks in place for num_new more computed tokens, as KVCacheManager.allocate_slots does."""
    need = -(-(seq.num_computed_tokens + num_new) // BLOCK_SIZE)
    while len(seq.block_table) < need:
        seq.block_table.append(KVBlock(next_block[0]))
        next_block[0] = (next_block[0] * 7 + 3) % 1000


@pytest.mark.parametrize("seed", range(6))
def test_random_steps_match_inputs_built_from_lists(seed):
    rng = random.Random(seed)
    runner = ModelRunner(None, None, BLOCK_SIZE, torch.device("cpu"), InputBatch(max_num_rows=2, max_blocks_per_seq=2))
    next_block = [1]
    seqs = [FakeSeq(i, [rng.randrange(100) for _ in range(rng.randrange(1, 30))]) for i in range(8)]
    for _ in range(40):
        scheduled, drafts = [], {}
        for seq in rng.sample(seqs, rng.randrange(1, len(seqs) + 1)):  # the others leave the batch this step
            left = seq.num_tokens - seq.num_computed_tokens
            n = left if left <= 1 else rng.randrange(1, left + 1)  # a decode, or a prefill chunk
            if left == 1 and rng.random() < 0.3:
                drafts[seq.seq_id] = [rng.randrange(100) for _ in range(rng.randrange(1, 4))]
            grow(seq, n + len(drafts.get(seq.seq_id, [])), next_block)
            scheduled.append((seq, n))
        check_step(runner, scheduled, drafts)
        for seq, n in scheduled:  # advance as the engine does, then change tables the ways KVCacheManager does
            seq.num_computed_tokens += n
            if seq.num_computed_tokens == seq.num_tokens:
                seq.token_ids.append(rng.randrange(100))
            event = rng.random()
            if event < 0.1:  # preempted by recompute: a new, empty table
                seq.block_table, seq.num_computed_tokens = [], 0
            elif event < 0.2 and seq.block_table:  # copy-on-write: a new list with one entry replaced
                i = rng.randrange(len(seq.block_table))
                seq.block_table = seq.block_table[:i] + [KVBlock(900 + i)] + seq.block_table[i + 1 :]


def test_rows_persist_and_are_given_back():
    batch = InputBatch(max_num_rows=4, max_blocks_per_seq=8)
    a = FakeSeq(0, [1] * 10, block_table=[KVBlock(5), KVBlock(6)])
    b = FakeSeq(1, [1] * 10, block_table=[KVBlock(7)])
    batch.begin_step()
    row_a, row_b = batch.sync(a), batch.sync(b)
    batch.end_step()
    a.block_table.append(KVBlock(9))  # grows in place: only the new entry is copied
    batch.begin_step()
    assert batch.sync(a) == row_a
    batch.end_step()
    assert batch.block_ids[row_a, :3].tolist() == [5, 6, 9]
    assert 1 not in batch.row_of and row_b in batch.free_rows, "b left the batch, so its row is free"
    a.block_table = [KVBlock(11)]  # replaced (e.g. swapped back in): copied whole
    batch.begin_step()
    batch.sync(a)
    batch.end_step()
    assert batch.block_ids[row_a, 0] == 11 and batch.num_blocks[row_a] == 1


def test_more_sequences_than_rows_and_longer_tables_than_columns():
    batch = InputBatch(max_num_rows=1, max_blocks_per_seq=1)
    seqs = [FakeSeq(i, [1], block_table=[KVBlock(10 * i + j) for j in range(i + 1)]) for i in range(5)]
    batch.begin_step()
    rows = [batch.sync(s) for s in seqs]
    batch.end_step()
    assert len(set(rows)) == 5
    for seq, row in zip(seqs, rows):
        assert batch.block_ids[row, : len(seq.block_table)].tolist() == [b.block_id for b in seq.block_table]
