"""One step's model inputs packed back to back in one preallocated host buffer, and one host-to-device copy.

    [input_ids | positions | slot_mapping | logit_indices | block_tables | seq_lens | query_start_loc]
      int64 [T]  int64 [T]   int64 [T]      int64 [R]       int32 [S, W]   int32 [S]  int32 [P + 1]

The runner fills numpy views of the buffer (a numpy op on a few hundred elements costs a fraction of a torch op's
dispatch), then `upload()` makes torch tensors of them: on CUDA one copy of the used bytes from pinned memory,
non-blocking, and views of the device copy; on CPU views of the buffer itself, no copy at all. Those tensors are
valid for the step only: the next step's `layout()` writes over them.

A layout (the regions' offsets, their numpy views, on CPU their tensors) is kept per step shape, so a run of decode
steps of one shape makes no views at all; `same_as_last` tells the runner that this step's regions are the previous
step's, so whatever it wrote there last step and has not changed since (block tables, constant regions) still holds.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

# Region name, numpy dtype, torch dtype, in buffer order: the int64 regions first keep every region 8-byte aligned.
_REGIONS = (
    ("input_ids", np.int64, torch.int64),
    ("positions", np.int64, torch.int64),
    ("slot_mapping", np.int64, torch.int64),
    ("logit_indices", np.int64, torch.int64),
    ("block_tables", np.int32, torch.int32),
    ("seq_lens", np.int32, torch.int32),
    ("query_start_loc", np.int32, torch.int32),
)
_ALIGN_BYTES = 8
_ITEM_BYTES = {np.int64: 8, np.int32: 4}
# Layouts kept: a decode run uses one or two (the block-table width grows every block_size tokens); mixed prefill
# steps make new ones, so the cache is emptied when full rather than grown.
_MAX_LAYOUTS = 64


class StepShape(NamedTuple):
    num_tokens: int  # T
    num_seqs: int  # S
    num_logit_rows: int  # R
    block_table_width: int  # W
    num_prefills: int  # P

    def region_shapes(self) -> tuple[tuple[int, ...], ...]:
        t, s = self.num_tokens, self.num_seqs
        return (t,), (t,), (t,), (self.num_logit_rows,), (s, self.block_table_width), (s,), (self.num_prefills + 1,)


class _Layout:
    __slots__ = ("regions", "num_bytes", "views", "tensors")

    def __init__(self, regions: list[tuple[int, int, tuple[int, ...]]], num_bytes: int, views: list[np.ndarray]):
        self.regions = regions  # (byte offset, byte count, shape) per region
        self.num_bytes = num_bytes
        self.views = views  # the regions in the host buffer
        self.tensors: list[torch.Tensor] | None = None  # on CPU: torch views of the same memory, made once


class StepBuffer:
    def __init__(self, device: torch.device, initial_bytes: int = 1 << 16):
        self.device = device
        self.pinned = device.type == "cuda"  # pinned host memory: the copy is a DMA that need not block the CPU
        self.on_cpu = device.type == "cpu"  # (device.type makes a new string at each read)
        self.host = torch.empty(initial_bytes, dtype=torch.uint8, pin_memory=self.pinned)  # [bytes]
        self.host_np = self.host.numpy()
        self.copy_done: torch.cuda.Event | None = None  # recorded after the last copy; its source is the buffer
        self._layouts: dict[StepShape, _Layout] = {}
        self._current: _Layout | None = None
        self.same_as_last = False  # the last layout() returned the regions of the one before it

    @property
    def views(self) -> list[np.ndarray]:
        """This step's regions in the host buffer."""
        return self._current.views if self._current is not None else []

    @property
    def num_bytes_used(self) -> int:
        return self._current.num_bytes if self._current is not None else 0

    def layout(self, shape: StepShape) -> list[np.ndarray]:
        """Numpy views of this step's regions, in _REGIONS order, to be filled by the caller."""
        if self.copy_done is not None:
            self.copy_done.synchronize()  # the previous step's copy may still be reading the buffer
            self.copy_done = None
        layout = self._layouts.get(shape)
        if layout is None:
            layout = self._new_layout(shape)
        self.same_as_last = layout is self._current
        self._current = layout
        return layout.views

    def _new_layout(self, shape: StepShape) -> _Layout:
        regions, offset = [], 0
        for (_, np_dtype, _), region_shape in zip(_REGIONS, shape.region_shapes()):
            num_bytes = math.prod(region_shape) * _ITEM_BYTES[np_dtype]
            regions.append((offset, num_bytes, region_shape))
            offset += -(-num_bytes // _ALIGN_BYTES) * _ALIGN_BYTES
        if offset > self.host.numel():
            self.host = torch.empty(2 * offset, dtype=torch.uint8, pin_memory=self.pinned)
            self.host_np = self.host.numpy()
            self._layouts.clear()  # their views are of the old buffer
            self._current = None
        elif len(self._layouts) >= _MAX_LAYOUTS:
            self._layouts.clear()
        views = [
            self.host_np[start : start + num_bytes].view(np_dtype).reshape(region_shape)
            for (start, num_bytes, region_shape), (_, np_dtype, _) in zip(regions, _REGIONS)
        ]
        layout = self._layouts[shape] = _Layout(regions, offset, views)
        return layout

    def upload(self) -> list[torch.Tensor]:
        """The regions as tensors on the device, in _REGIONS order. On CPU the same tensor objects for every step
        of one layout (views of the buffer), so what the caller builds from them can be kept per layout too."""
        layout = self._current
        assert layout is not None  # layout() comes first
        if self.on_cpu:
            if layout.tensors is None:
                layout.tensors = [torch.from_numpy(view) for view in layout.views]
            return layout.tensors
        device_bytes = self.host[: layout.num_bytes].to(self.device, non_blocking=self.pinned)
        if self.pinned:
            self.copy_done = torch.cuda.Event()
            self.copy_done.record()
        return [
            device_bytes[start : start + num_bytes].view(torch_dtype).view(region_shape)
            for (start, num_bytes, region_shape), (_, _, torch_dtype) in zip(layout.regions, _REGIONS)
        ]
