"""Turns a scheduled step into one flattened forward pass: input ids, positions, slot mapping, block tables and
sequence lengths, from the persistent batch's block tables (engine/input_batch.py) and a few numpy ops over one
host buffer, copied to the device at once (engine/step_buffer.py).

Batch layout: [decode sequences (1 token each) | prefill chunks]; logits are computed only for the last token of
each sequence that has all its tokens computed after this step (decodes, and prefills on their last chunk).

A step of decodes only (the steady state) takes a shorter path: one loop over the sequences for what changes every
step (token, position, slot, length), and nothing else when the batch is the one of the step before and no block
table changed: the block-table rows, the constant regions, the buffer's views and tensors and the attention
metadata are all kept from that step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.attention import AttentionMetadata
from engine.cuda_graphs import DecodeGraphRunner
from engine.input_batch import InputBatch
from engine.kv_cache import KVCache
from engine.models.llama import LlamaModel
from engine.pooling import PoolSpan, pool_step
from engine.sequence import Sequence
from engine.step_buffer import StepBuffer, StepShape
from engine.step_profile import StepClock


@dataclass
class StepInputs:
    input_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    meta: AttentionMetadata
    logit_indices: torch.Tensor  # [R] rows of the hidden states to sample from
    sample_seqs: list[Sequence]  # sequences that sample this step, in row order
    num_rows: list[int]  # logits rows per sample_seqs entry: 1, or k + 1 for a sequence verifying k drafts
    pool_spans: list[PoolSpan]  # embedding requests' rows of the hidden states (engine/pooling.py)
    every_row_sampled: bool = False  # logit_indices is 0..T-1: the logits come from the hidden states as they are


class ModelRunner:
    def __init__(
        self,
        model: LlamaModel,
        kv_cache: KVCache,
        block_size: int,
        device: torch.device,
        batch: InputBatch,
        clock: StepClock | None = None,
        pools: bool = True,
    ):
        self.model = model
        self.kv_cache = kv_cache
        self.block_size = block_size
        self.device = device
        self.batch = batch  # block tables of the sequences in the batch, kept from step to step
        self.buffer = StepBuffer(device)  # this step's inputs, one host-to-device copy
        self.graph_runner: DecodeGraphRunner | None = None  # set by the engine on CUDA (cuda_graphs.py)
        self.clock = clock or StepClock()  # the engine's, to split prepare from forward; a draft runner's is off
        self.pools = pools  # embeddings come from the served model, never from a draft model's runner
        # The last decode-only step's rows and the batch's block-table version then: while both hold and the buffer
        # lays the step out as then, its block tables and constant regions are still in place (_prepare_decodes).
        self._decode_rows: list[int] | None = None
        self._decode_version = -1
        # The attention metadata last built, with the tensors it views: on CPU the buffer gives the same tensors for
        # every step of one layout, so it is built once per run of such steps.
        self._meta_key: tuple[list[torch.Tensor], int] | None = None
        self._meta: AttentionMetadata | None = None

    def execute(
        self, scheduled: list[tuple[Sequence, int]], drafts: dict[int, list[int]] | None = None
    ) -> tuple[torch.Tensor, StepInputs]:
        """Run one step; return logits [R, V] (fp32) and the inputs (which say whose rows they are).

        drafts: seq_id -> draft tokens appended after that sequence's scheduled token; every one of its positions
        gets a logits row, for verification."""
        inputs = self.prepare(scheduled, drafts or {})
        self.clock.lap("prepare")
        if self.graph_runner is not None and self.graph_runner.can_run(inputs):
            hidden = self.graph_runner.run(inputs)
        else:
            hidden = self.model.forward(inputs.input_ids, inputs.positions, self.kv_cache.layers, inputs.meta)
        if inputs.pool_spans:
            pool_step(self.model, hidden, inputs.pool_spans)
        if not inputs.sample_seqs:
            logits = hidden.new_empty((0, self.model.spec.vocab_size), dtype=torch.float32)
        elif inputs.every_row_sampled:
            logits = self.model.compute_logits(hidden)
        else:
            logits = self.model.compute_logits(hidden[inputs.logit_indices])
        self.clock.lap("forward")
        return logits, inputs

    def prepare(self, scheduled: list[tuple[Sequence, int]], drafts: dict[int, list[int]]) -> StepInputs:
        if not drafts and scheduled and scheduled[-1][1] == 1:  # admitted prompts come last: a mixed step skips it
            inputs = self._prepare_decodes(scheduled)
            if inputs is not None:
                return inputs
        self._decode_rows = None  # the buffer's regions are about to hold another step's inputs
        # A sequence verifying drafts has several query tokens, so it takes the prefill (chunk) attention path.
        decodes: list[tuple[Sequence, int]] = []
        prefills: list[tuple[Sequence, int]] = []
        for item in scheduled:
            (decodes if item[1] == 1 and item[0].seq_id not in drafts else prefills).append(item)
        ordered = decodes + prefills

        # The one per-sequence loop: what only the Sequence objects know (tokens, progress, the batch row).
        batch = self.batch
        batch.begin_step()
        token_ids: list[int] = []
        rows: list[int] = []  # persistent-batch row per sequence
        starts: list[int] = []  # first position computed this step
        lens: list[int] = []  # tokens computed this step (drafts included)
        logit_rows: list[int] = []
        sample_seqs: list[Sequence] = []
        num_rows: list[int] = []
        pool_spans: list[PoolSpan] = []
        end = 0  # tokens so far in the flattened batch
        for seq, n in ordered:
            start = seq.num_computed_tokens
            seq_tokens = seq.token_ids
            if n == 1:
                token_ids.append(seq_tokens[start])
            else:
                token_ids.extend(seq_tokens[start : start + n])
            # Sample only where every token of the sequence is computed after this step (all draft positions too).
            samples = start + n == len(seq_tokens)
            draft = drafts.get(seq.seq_id) if drafts else None
            if draft:
                token_ids.extend(draft)
                n += len(draft)
            elif self.pools and seq.pooling is not None:
                pool_spans.append(PoolSpan(seq, end, end + n))
            end += n
            if samples:
                k = 1 + (len(draft) if draft else 0)  # logits rows: the pending token's and each draft's
                logit_rows.extend(range(end - k, end))
                sample_seqs.append(seq)
                num_rows.append(k)
            rows.append(batch.sync(seq))
            starts.append(start)
            lens.append(n)
        batch.end_step()
        inputs = self._pack(token_ids, rows, starts, lens, logit_rows, len(decodes), sample_seqs, num_rows)
        inputs.pool_spans = pool_spans
        return inputs

    def _prepare_decodes(self, scheduled: list[tuple[Sequence, int]]) -> StepInputs | None:
        """prepare() for a step where every sequence computes its one pending token and samples (no prefill chunk,
        no drafts, no pooling); None for any other step, which prepare() then packs in full."""
        batch, bs, pools = self.batch, self.block_size, self.pools
        batch.begin_step()
        sync = batch.sync
        token_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        seq_lens: list[int] = []
        rows: list[int] = []
        sample_seqs: list[Sequence] = []
        for seq, n in scheduled:
            start = seq.num_computed_tokens
            tokens = seq.token_ids
            if n != 1 or start + 1 != len(tokens) or (pools and seq.pooling is not None):
                return None  # prepare() starts the step over (begin_step again), so these syncs do no harm
            token_ids.append(tokens[start])
            positions.append(start)
            slots.append(seq.block_table[start // bs].block_id * bs + start % bs)
            seq_lens.append(start + 1)
            rows.append(sync(seq))
            sample_seqs.append(seq)
        batch.end_step()
        num_seqs = len(rows)
        width = max(positions) // bs + 1  # blocks the longest context spans
        buffer = self.buffer
        views = buffer.layout(StepShape(num_seqs, num_seqs, num_seqs, width, 0))
        input_ids, positions_out, slot_mapping, logit_indices, block_tables, seq_lens_out, query_start = views
        input_ids[:] = token_ids
        positions_out[:] = positions
        slot_mapping[:] = slots
        seq_lens_out[:] = seq_lens
        if not (buffer.same_as_last and batch.version == self._decode_version and rows == self._decode_rows):
            np.take(batch.block_ids[:, :width], rows, axis=0, out=block_tables, mode="clip")
            logit_indices[:] = np.arange(num_seqs)
            query_start[0] = 0
            self._decode_rows, self._decode_version = rows, batch.version
        tensors = buffer.upload()
        ids_t, positions_t, _, logit_indices_t = tensors[:4]
        return StepInputs(ids_t, positions_t, self._attention_meta(tensors, num_seqs), logit_indices_t, sample_seqs,
                          [1] * num_seqs, [], True)  # fmt: skip

    def _attention_meta(self, tensors: list[torch.Tensor], num_decodes: int) -> AttentionMetadata:
        """The step's attention metadata over the uploaded regions (the last one built, if it views these)."""
        key = self._meta_key
        if key is not None and key[0] is tensors and key[1] == num_decodes:
            assert self._meta is not None  # set with the key
            return self._meta
        _, _, slots_t, _, block_tables_t, seq_lens_t, query_start_t = tensors
        nd = num_decodes
        meta = AttentionMetadata(
            slot_mapping=slots_t,
            num_decodes=nd,
            decode_block_tables=block_tables_t[:nd],
            decode_seq_lens=seq_lens_t[:nd],
            prefill_block_tables=block_tables_t[nd:],
            prefill_seq_lens=seq_lens_t[nd:],
            prefill_query_start_loc=query_start_t,
            num_prefills=block_tables_t.shape[0] - nd,
        )
        self._meta_key, self._meta = (tensors, nd), meta
        return meta

    def _pack(
        self,
        token_ids: list[int],
        rows: list[int],
        starts: list[int],
        lens: list[int],
        logit_rows: list[int],
        num_decodes: int,
        sample_seqs: list[Sequence],
        num_rows: list[int],
    ) -> StepInputs:
        """Vectorised part of prepare: numpy over the step buffer, then one upload."""
        bs = self.block_size
        num_seqs, num_tokens = len(rows), len(token_ids)
        rows_np = np.array(rows, dtype=np.int64)  # [S]
        starts_np = np.array(starts, dtype=np.int64)  # [S]
        seq_lens = starts_np + lens if num_tokens > num_seqs else starts_np + 1  # [S] context after this step
        width = -(-int(seq_lens.max()) // bs)  # blocks the longest context spans
        shape = StepShape(num_tokens, num_seqs, len(logit_rows), width, num_seqs - num_decodes)
        views = self.buffer.layout(shape)
        input_ids, positions, slot_mapping, logit_indices, block_tables, seq_lens_out, query_start = views
        input_ids[:] = token_ids
        if num_tokens == num_seqs:  # one token per sequence (decodes): positions are the starts
            positions[:] = starts_np
            token_rows = rows_np
            query_start[:] = np.arange(num_seqs - num_decodes + 1)
        else:
            lens_np = np.array(lens, dtype=np.int64)  # [S]
            cu = np.zeros(num_seqs + 1, dtype=np.int64)  # [S + 1] token offsets of the sequences
            np.cumsum(lens_np, out=cu[1:])
            seq_index = np.repeat(np.arange(num_seqs), lens_np)  # [T] sequence of each token
            positions[:] = np.arange(num_tokens) - cu[:-1][seq_index] + starts_np[seq_index]
            token_rows = rows_np[seq_index]
            query_start[:] = cu[num_decodes:] - cu[num_decodes]
        table = self.batch.block_ids
        slot_mapping[:] = table[token_rows, positions // bs]
        slot_mapping *= bs  # in int64: block id x block size can pass int32 in a large pool
        slot_mapping += positions % bs
        np.take(table[:, :width], rows_np, axis=0, out=block_tables, mode="clip")
        seq_lens_out[:] = seq_lens
        logit_indices[:] = logit_rows

        tensors = self.buffer.upload()
        ids_t, positions_t, _, logit_indices_t = tensors[:4]
        meta = self._attention_meta(tensors, num_decodes)
        every_row = len(logit_rows) == num_tokens  # ascending rows, one per token: all of them
        return StepInputs(ids_t, positions_t, meta, logit_indices_t, sample_seqs, num_rows, [], every_row)
