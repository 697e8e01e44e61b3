"""The step's grammar masks: one xgrammar call fills every constrained row's bitmask, one op applies them.

The bitmask is xgrammar's packed int32 layout ([rows, ceil(V / 32)], bit j of a row set when token j is allowed),
filled on the CPU by xgrammar's thread pool and copied to the logits' device for the apply. Unconstrained rows are
neither filled nor touched, so their logits (and tokens) are exactly what they would be in a batch of their own.
"""

from __future__ import annotations

import os

import torch
import xgrammar as xgr

# Filling a row is a walk of its grammar's state; rows are independent, so a big batch spreads over a few threads.
DEFAULT_FILL_THREADS = max(1, min(8, (os.cpu_count() or 2) // 2))


class GrammarMasker:
    def __init__(self, vocab_size: int, max_threads: int = DEFAULT_FILL_THREADS):
        self.vocab_size = vocab_size
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)  # grows to the largest batch seen, then is reused
        self._batch = xgr.BatchGrammarMatcher(max_threads)

    def apply(self, logits: torch.Tensor, matchers: list[xgr.GrammarMatcher | None]) -> None:
        """Set to -inf, in place, each row's tokens that its matcher does not allow next (rows without one: as is)."""
        rows = [i for i, m in enumerate(matchers) if m is not None]
        if not rows:
            return
        if self._bitmask.shape[0] < len(matchers):
            self._bitmask = xgr.allocate_token_bitmask(len(matchers), self.vocab_size)
        constrained = [m for m in matchers if m is not None]
        self._batch.batch_fill_next_token_bitmask(constrained, self._bitmask, rows)
        bitmask = self._bitmask if logits.device.type == "cpu" else self._bitmask.to(logits.device, non_blocking=True)
        xgr.apply_token_bitmask_inplace(
            logits, bitmask, vocab_size=min(self.vocab_size, logits.shape[-1]), indices=rows
        )
