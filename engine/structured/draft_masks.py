"""Grammar masks for speculative decoding (engine/speculative.py): which drafts a grammar allows, the mask of each
verification position, and a draft model's steps under the grammar.

Verification. A constrained sequence's drafts d_1..d_n are verified at n + 1 positions, and position j must be masked
with the grammar's state after d_1..d_j: the mask plain decoding would use once it had sampled those tokens. xgrammar's
GrammarMatcher.traverse_draft_tree walks a draft (a chain: a tree of one child per node) from the matcher's state in
one call, fills one bitmask row per position, and leaves the matcher as it was (no accept and rollback from Python):

    row j         the mask after d_1..d_j (row 0: the matcher's state now)
    rejected d_j  row j all zero, rows after it not written
    stop d_j      the grammar has ended: row j all zero (the sequence ends at d_j, so row j is never sampled from)

The draft is cut before its first token whose bit is unset in the row before it, in one gather over the step's drafts.
A stop token passes that test and is kept (the sequence ends there, as plain decoding would end it), and what follows it
is cut. Rows left all zero become all-allowed: after a stop token a row is verified but never emitted, and an all -inf
row would turn a sampled request's softmax into NaN.

Drafting. A draft model proposes under the grammar too (GrammarDrafting): each of its steps masks its logits with the
matchers advanced by the drafts so far, so its drafts never break the grammar. A free draft model's argmax is rarely a
token the grammar allows (a random or small model rarely writes JSON), so its drafts would be cut at once. The drafts
stay greedy point masses, which keeps verification exact.
"""

from __future__ import annotations

import torch
import xgrammar as xgr

from engine.structured.masker import GrammarMasker


class DraftMasks:
    """One step's verification masks, by sequence id: `check` at proposal time, `apply` at verification."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)  # grows to the largest step seen, then is reused
        self._first_row: dict[int, int] = {}  # sequence id -> the row of its position 0 in _bitmask

    def check(self, seq_ids: list[int], matchers: list[xgr.GrammarMatcher], drafts: list[list[int]]) -> list[int]:
        """Fill the masks of each draft's positions (the last step's are forgotten); return how many leading tokens
        of each draft the grammar allows."""
        self._first_row = {}
        if not drafts:
            return []
        num_rows = torch.tensor([len(d) + 1 for d in drafts])
        first_rows = num_rows.cumsum(0) - num_rows
        if self._bitmask.shape[0] < int(num_rows.sum()):
            self._bitmask = xgr.allocate_token_bitmask(int(num_rows.sum()), self.vocab_size)
        for matcher, draft, first, rows in zip(matchers, drafts, first_rows.tolist(), num_rows.tolist()):
            # Node 0 is the matcher's state now (its token is not read); node j holds d_j, the only child of node j-1.
            chain = torch.arange(1, rows + 1)
            chain[-1] = -1
            nodes = torch.tensor([0, *draft])
            matcher.traverse_draft_tree(chain, torch.full((rows,), -1), nodes, self._bitmask[first : first + rows])
        self._first_row = dict(zip(seq_ids, first_rows.tolist()))
        num_allowed = self._num_allowed(drafts, first_rows)
        used = self._bitmask[: int(num_rows.sum())]
        used[(used == 0).all(1)] = -1  # see the module docstring: the rows after stop tokens (and unused rejected ones)
        return num_allowed

    def _num_allowed(self, drafts: list[list[int]], first_rows: torch.Tensor) -> list[int]:
        """Per draft, the index of its first token whose bit is unset in the row before it (its length if none)."""
        lengths = torch.tensor([len(d) for d in drafts])
        tokens = torch.tensor([t for d in drafts for t in d], dtype=torch.long)
        if not len(tokens):
            return lengths.tolist()
        draft_of = torch.repeat_interleave(torch.arange(len(drafts)), lengths)
        position = _offsets(lengths)  # j - 1 for token d_j
        words = self._bitmask[first_rows[draft_of] + position, tokens >> 5]
        allowed = ((words >> (tokens & 31)) & 1).bool()
        first_rejected = torch.where(allowed, lengths[draft_of], position)
        return lengths.scatter_reduce(0, draft_of, first_rejected, reduce="amin").tolist()

    def apply(self, logits: torch.Tensor, seq_ids: list[int], num_drafts: list[int]) -> None:
        """logits [S, k+1, V]: set to -inf, in place, what the grammar forbids at positions 0..num_drafts[i] of each
        checked sequence; unchecked sequences are left as they are."""
        constrained = [i for i, seq_id in enumerate(seq_ids) if seq_id in self._first_row]
        if not constrained:
            return
        num_seqs, num_positions, vocab = logits.shape
        counts = torch.tensor([num_drafts[i] + 1 for i in constrained])
        offsets = _offsets(counts)
        source = torch.tensor([self._first_row[seq_ids[i]] for i in constrained]).repeat_interleave(counts) + offsets
        target = (torch.tensor(constrained) * num_positions).repeat_interleave(counts) + offsets
        bitmask = torch.full((num_seqs * num_positions, self._bitmask.shape[1]), -1, dtype=torch.int32)
        bitmask[target] = self._bitmask[source]
        xgr.apply_token_bitmask_inplace(
            logits.view(num_seqs * num_positions, vocab),
            bitmask.to(logits.device, non_blocking=True),
            vocab_size=min(self.vocab_size, vocab),
            indices=target.tolist(),
        )


class GrammarDrafting:
    """One draft-model proposal under the grammar: mask each step's logits, advance the matchers by the argmax, and
    put the matchers back where they were at the end (`restore`, always: the engine advances them by what it keeps)."""

    def __init__(
        self, masker: GrammarMasker, batch: xgr.BatchGrammarMatcher, matchers: list[xgr.GrammarMatcher | None]
    ):
        self._masker = masker
        self._batch = batch
        # By the proposing sequence's index (None: unconstrained, left out).
        self._matchers = {i: m for i, m in enumerate(matchers) if m is not None}
        self._live = dict(self._matchers)  # still drafting under the grammar
        self._num_accepted = dict.fromkeys(self._matchers, 0)

    def mask(self, logits: torch.Tensor, rows: list[int]) -> None:
        """logits [R, V] of one draft step; rows[r]: the sequence (index into matchers) that row r belongs to."""
        self._masker.apply(logits, [self._live.get(i) for i in rows])

    def advance(self, rows: list[int], tokens: list[int]) -> None:
        live = [(i, t) for i, t in zip(rows, tokens) if i in self._live]
        if not live:
            return
        matchers = [self._live[i] for i, _ in live]
        accepted = self._batch.batch_accept_token(matchers, [t for _, t in live])
        for (i, _), matcher, ok in zip(live, matchers, accepted):
            self._num_accepted[i] += ok
            # An ended grammar masks nothing more (xgrammar refuses to fill it); the drafts after its stop token are
            # cut by DraftMasks.check. A refused token cannot happen under the mask; if it did, check cuts it too.
            if not ok or matcher.is_terminated():
                del self._live[i]

    def restore(self) -> None:
        advanced = [i for i, n in self._num_accepted.items() if n]
        if advanced:
            self._batch.batch_rollback([self._matchers[i] for i in advanced], [self._num_accepted[i] for i in advanced])
        self._num_accepted = dict.fromkeys(self._matchers, 0)


def _offsets(counts: torch.Tensor) -> torch.Tensor:
    """0, 1, .., counts[0]-1, 0, 1, .., counts[1]-1, ...: each item's index within its own span."""
    starts = counts.cumsum(0) - counts
    return torch.arange(int(counts.sum())) - starts.repeat_interleave(counts)
