"""Decode steps replayed from CUDA graphs: one graph per batch size in a fixed set, a step padded up to the next.

A decode step of a small model is a few hundred kernel launches of microseconds each, so on a GPU the launch
overhead, not the math, sets the step time; a captured graph replays them all with one launch. Everything a graph
reads lives in static buffers that each step overwrites in place:

    input_ids [S]  positions [S]  slot_mapping [S]  block_tables [S, max_blocks]  seq_lens [S]   (S = largest size)

Padding rows get slot -1 (the cache write skips them) and length 0 (the Triton decode kernel returns zeros); their
logits are never read. The block-table width is fixed at the model's max_blocks per sequence, because the decode
kernel's split plan depends on it. With use_graphs=False the same padded path runs eagerly, which is how its
padding logic is tested on CPU.
"""

from __future__ import annotations

import logging

import torch

from engine.attention import AttentionMetadata

log = logging.getLogger(__name__)

DEFAULT_CAPTURE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class DecodeGraphRunner:
    def __init__(self, model, kv_cache, max_blocks_per_seq: int, capture_sizes, device: torch.device, use_graphs: bool):
        self.model = model
        self.kv_cache = kv_cache
        self.sizes = sorted(capture_sizes)
        size = self.sizes[-1]
        self.input_ids = torch.zeros(size, dtype=torch.long, device=device)
        self.positions = torch.zeros(size, dtype=torch.long, device=device)
        self.slot_mapping = torch.full((size,), -1, dtype=torch.long, device=device)
        self.block_tables = torch.zeros(size, max_blocks_per_seq, dtype=torch.int32, device=device)
        self.seq_lens = torch.zeros(size, dtype=torch.int32, device=device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        if use_graphs:
            self._capture_all()

    def can_run(self, inputs) -> bool:
        meta = inputs.meta
        return meta.num_prefills == 0 and meta.num_decodes <= self.sizes[-1]

    def run(self, inputs) -> torch.Tensor:
        """Hidden states [B, H] of a decode-only step."""
        meta = inputs.meta
        batch = meta.num_decodes
        size = next(s for s in self.sizes if s >= batch)
        width = meta.decode_block_tables.shape[1]
        self.input_ids[:batch].copy_(inputs.input_ids)
        self.positions[:batch].copy_(inputs.positions)
        self.slot_mapping[:batch].copy_(meta.slot_mapping)
        self.slot_mapping[batch:size].fill_(-1)
        self.block_tables[:batch, :width].copy_(meta.decode_block_tables)
        self.block_tables[:batch, width:].zero_()
        self.seq_lens[:batch].copy_(meta.decode_seq_lens)
        self.seq_lens[batch:size].zero_()
        if size in self.graphs:
            self.graphs[size].replay()
            return self.outputs[size][:batch]
        return self._forward(size)[:batch]

    def _forward(self, size: int) -> torch.Tensor:
        meta = AttentionMetadata(
            slot_mapping=self.slot_mapping[:size],
            num_decodes=size,
            decode_block_tables=self.block_tables[:size],
            decode_seq_lens=self.seq_lens[:size],
            prefill_block_tables=self.block_tables[:0],
            prefill_seq_lens=self.seq_lens[:0],
            prefill_query_start_loc=self.seq_lens[:1],
            num_prefills=0,
        )
        return self.model.forward(self.input_ids[:size], self.positions[:size], self.kv_cache.layers, meta)

    def _capture_all(self) -> None:
        pool = None
        self.slot_mapping.fill_(-1)  # capture writes nothing into the cache
        for size in reversed(self.sizes):  # largest first, so smaller graphs reuse its memory pool
            self._forward(size)  # warm-up: Triton compiles and autotunes outside the capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.outputs[size] = self._forward(size)
            pool = graph.pool()
            self.graphs[size] = graph
        torch.cuda.synchronize()
        log.info("captured decode CUDA graphs for batch sizes %s", self.sizes)
