"""The step's grammar masks: one xgrammar call fills every constrained row's bitmask, one op applies them.

The bitmask is xgrammar's packed int32 layout ([rows, ceil(V / 32)], bit j of a row set when token j is allowed),
filled on the CPU by xgrammar's thread pool. On an accelerator it is copied to the logits' device and xgrammar's
kernel applies it to every row (unconstrained rows get a mask that allows every token). On the CPU (CpuMaskApply) it
is unpacked by a byte lookup into a gate per token, which one `minimum` applies: xgrammar's CPU kernel tests the bits
one at a time, ~5x slower at a 4k vocabulary and batch 64 (`sluicegate bench engine --structured`). Unconstrained
rows' logits (and tokens) are exactly what they would be in a batch of their own: on the CPU they are not touched,
on an accelerator no bit of their mask is clear.
"""

from __future__ import annotations

import math
import os

import torch
import xgrammar as xgr

# Filling a row is a walk of its grammar's state; rows are independent, so a big batch spreads over a few threads.
DEFAULT_FILL_THREADS = max(1, min(8, (os.cpu_count() or 2) // 2))

# Each byte value's 8 gates, bit b of the byte the gate of its token b: +inf where the bit is set (the token is
# allowed, and min(logit, +inf) is the logit, exactly, +inf included), -inf where it is clear (banned).
_BYTE_GATES = torch.tensor([[math.inf if byte >> bit & 1 else -math.inf for bit in range(8)] for byte in range(256)])


class GrammarMasker:
    def __init__(self, vocab_size: int, max_threads: int = DEFAULT_FILL_THREADS):
        self.vocab_size = vocab_size
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)  # grows to the largest batch seen, then is reused
        self._batch = xgr.BatchGrammarMatcher(max_threads)
        self._cpu_apply = CpuMaskApply(self._bitmask.shape[1])

    def apply(self, logits: torch.Tensor, matchers: list[xgr.GrammarMatcher | None]) -> None:
        """Set to -inf, in place, each row's tokens that its matcher does not allow next (rows without one: as is).
        logits: [R, V] fp32, one row per matcher."""
        rows = [i for i, m in enumerate(matchers) if m is not None]
        if not rows:
            return
        if self._bitmask.shape[0] < len(matchers):
            self._bitmask = xgr.allocate_token_bitmask(len(matchers), self.vocab_size)
        constrained = [m for m in matchers if m is not None]
        self._batch.batch_fill_next_token_bitmask(constrained, self._bitmask, rows)
        vocab_size = min(self.vocab_size, logits.shape[-1])
        if logits.device.type == "cpu":
            self._cpu_apply(logits, self._bitmask, rows, vocab_size)
            return
        if not self._bitmask.is_pinned():
            # Pinned, so the copy below does not wait for the kernels already queued (a copy from pageable memory
            # does), which would keep async_output_processing from overlapping steps that hold structured outputs.
            # Refilled only after the step's tokens are back, so no copy of it is still pending then.
            self._bitmask = self._bitmask.pin_memory()
        allow_unconstrained(self._bitmask, matchers)
        bitmask = self._bitmask[: len(matchers)].to(logits.device, non_blocking=True)
        xgr.apply_token_bitmask_inplace(logits, bitmask, vocab_size=vocab_size)


def allow_unconstrained(bitmask: torch.Tensor, matchers: list[xgr.GrammarMatcher | None]) -> None:
    """Every token allowed in the rows without a matcher, so a kernel applying every row leaves them as they are and
    needs no row list (xgrammar would copy one from pageable memory)."""
    free = [i for i, m in enumerate(matchers) if m is None]
    if free:
        bitmask[free] = -1


class CpuMaskApply:
    """Bitmask rows applied to CPU logits: their bytes (the int32 words' bytes low first, as x86-64 and aarch64 store
    them, so byte k of a row holds tokens 8k..8k+7) index _BYTE_GATES in one index_select, and logits take the
    minimum with the gates. Both work buffers are kept at the largest row count seen: nothing is allocated per step
    but the gathered rows of a batch that is only partly constrained."""

    def __init__(self, words_per_row: int):
        self._byte_ids = torch.empty(0, words_per_row * 4, dtype=torch.long)
        self._gates = torch.empty(0, words_per_row * 32)

    def __call__(self, logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int], vocab_size: int) -> None:
        """logits[rows[i]] takes bitmask row rows[i], over its first vocab_size tokens."""
        num_rows = len(rows)
        if self._gates.shape[0] < num_rows:
            self._byte_ids = torch.empty(num_rows, self._byte_ids.shape[1], dtype=torch.long)
            self._gates = torch.empty(num_rows, self._gates.shape[1])
        every_row = num_rows == logits.shape[0]  # then rows is 0..R-1: no gather
        index = None if every_row else torch.tensor(rows)
        words = bitmask[:num_rows] if index is None else bitmask[index]
        byte_ids = self._byte_ids[:num_rows]
        byte_ids.copy_(words.view(torch.uint8))
        gates = self._gates[:num_rows]
        torch.index_select(_BYTE_GATES, 0, byte_ids.view(-1), out=gates.view(-1, 8))
        if index is None:
            target = logits[:, :vocab_size]
            torch.minimum(target, gates[:, :vocab_size], out=target)
        else:
            logits[index, :vocab_size] = torch.minimum(logits[index, :vocab_size], gates[:, :vocab_size])
