"""The persistent batch (vLLM V1's InputBatch idea): every sequence in the step batch owns a row of a preallocated
block-table array that is updated incrementally, so a step never rebuilds block tables from Python lists.

    row_of      {seq_id: row}                      a sequence keeps its row while it is scheduled step after step
    block_ids   [rows, max_blocks] int32           row r holds the block ids of its sequence's block_table
    num_blocks  [rows]                             entries of row r that mirror the table

A row is synced when its sequence is scheduled: new entries at the end of the table are copied in (one block per
block_size tokens, so a decode step mostly copies nothing), and a table that is a new list object (freed, forked,
copy-on-write, trimmed, swapped in: KVCacheManager never edits a table in place except to append) is copied whole.
A sequence missing from a step (finished, preempted, out of budget) gives its row back; if it returns, it is
copied whole once. Entries past a row's table hold stale but valid block ids, which kernels never read (they stop
at the sequence length). `version` counts the changes to block_ids, so the runner can tell that a step's rows hold
what they held the step before (a decode run between block boundaries) and skip copying them out again.
"""

from __future__ import annotations

import numpy as np

from engine.sequence import Sequence


class InputBatch:
    def __init__(self, max_num_rows: int, max_blocks_per_seq: int):
        self.block_ids = np.zeros((max_num_rows, max_blocks_per_seq), dtype=np.int32)  # [rows, max_blocks]
        self.num_blocks = [0] * max_num_rows
        self.tables: list[list | None] = [None] * max_num_rows  # the block_table list each row mirrors
        self.row_of: dict[int, int] = {}  # seq_id -> row
        self.free_rows = list(range(max_num_rows - 1, -1, -1))  # popped from the end: low rows first
        self.step_of_row = [0] * max_num_rows  # the last step that scheduled the row's sequence
        self.step = 0
        self.num_rows_used = 0  # rows claimed or synced in the current step
        self.version = 0  # bumped whenever block_ids changes

    def begin_step(self) -> None:
        self.step += 1
        self.num_rows_used = 0

    def sync(self, seq: Sequence) -> int:
        """The row of a sequence scheduled this step, its block ids up to date."""
        row = self.row_of.get(seq.seq_id)
        if row is None:
            row = self._claim(seq.seq_id)
        self.step_of_row[row] = self.step
        self.num_rows_used += 1
        table = seq.block_table
        known = self.num_blocks[row]
        if self.tables[row] is not table or len(table) < known:
            self.tables[row], known = table, 0
        num = len(table)
        if num > known:
            if num > self.block_ids.shape[1]:
                self._grow(self.block_ids.shape[0], num)
            self.block_ids[row, known:num] = [b.block_id for b in table[known:num]]
            self.num_blocks[row] = num
            self.version += 1
        return row

    def end_step(self) -> None:
        """Give back the rows of sequences this step did not schedule."""
        if len(self.row_of) == self.num_rows_used:
            return
        for seq_id, row in list(self.row_of.items()):
            if self.step_of_row[row] != self.step:
                del self.row_of[seq_id]
                self.tables[row] = None
                self.num_blocks[row] = 0
                self.free_rows.append(row)

    def _claim(self, seq_id: int) -> int:
        if not self.free_rows:
            # More sequences than rows (a draft runner's batch, or many forks at once): double the rows.
            rows = self.block_ids.shape[0]
            self._grow(2 * rows, self.block_ids.shape[1])
            self.free_rows = list(range(2 * rows - 1, rows - 1, -1))
        row = self.free_rows.pop()
        self.row_of[seq_id] = row
        return row

    def _grow(self, num_rows: int, num_cols: int) -> None:
        old = self.block_ids
        self.version += 1
        self.block_ids = np.zeros((num_rows, max(num_cols, old.shape[1])), dtype=np.int32)
        self.block_ids[: old.shape[0], : old.shape[1]] = old
        extra = num_rows - old.shape[0]
        self.num_blocks += [0] * extra
        self.tables += [None] * extra
        self.step_of_row += [0] * extra
