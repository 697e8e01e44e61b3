"""Prompt-lookup (n-gram) proposals: no draft model, just the sequence's own history.

For each sequence, find the most recent earlier occurrence of its last n tokens in prompt + output, trying the
longest n first (max_n down to min_n), and propose the up to k tokens that followed it. Copy-heavy requests (code
edits, summaries that quote, RAG answers) repeat long spans of their context, so these drafts are often accepted.

The proposal is a point mass: pass `draft_probs=None` to `rejection_sample` (its q is one-hot at the draft token).

Matching is vectorized over positions (max_n numpy passes per sequence), never a Python scan per position:

    tokens            t_0 ... t_{L-1}                         (suffix = the last max_n tokens)
    ends              every j < L-1 with t_j == t_{L-1}       the only places a match can end
    match_len[j]      largest n <= max_n with t_{j-d} == t_{L-1-d} for all d < n
    best              the j with the largest match_len >= min_n, the latest among ties
    proposal          t_{j+1} ... t_{j+k}                      (fewer near the end of the sequence)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class NgramConfig:
    num_speculative_tokens: int = 4
    """k: most tokens proposed per step."""
    min_n: int = 1
    """Shortest suffix that may be matched; 1 proposes after any repeated token (more drafts, fewer accepted)."""
    max_n: int = 4
    """Longest suffix tried first; a longer match predicts the continuation better."""
    max_lookback_tokens: int = 0
    """Search only this many most recent tokens (0: the whole sequence); bounds the cost for very long contexts."""

    def __post_init__(self) -> None:
        if self.num_speculative_tokens < 1:
            raise ValueError(f"num_speculative_tokens={self.num_speculative_tokens}: must be at least 1")
        if not 1 <= self.min_n <= self.max_n:
            raise ValueError(f"min_n={self.min_n}, max_n={self.max_n}: need 1 <= min_n <= max_n")
        if self.max_lookback_tokens < 0:
            raise ValueError(f"max_lookback_tokens={self.max_lookback_tokens}: use 0 (no limit) or a positive count")


class NgramProposer:
    def __init__(self, config: NgramConfig):
        self.config = config

    def propose(self, token_ids: Sequence[int] | np.ndarray, num_tokens: int | None = None) -> np.ndarray:
        """Draft tokens (int64, possibly empty) for one sequence of prompt + output token ids.

        num_tokens caps k for this call, e.g. when the request is near max_tokens.
        """
        k = self.config.num_speculative_tokens
        if num_tokens is not None:
            k = min(k, num_tokens)
        tokens = np.asarray(token_ids, dtype=np.int64)
        if self.config.max_lookback_tokens:
            tokens = tokens[-self.config.max_lookback_tokens :]
        end = _best_match_end(tokens, self.config.min_n, self.config.max_n)
        if end < 0 or k <= 0:
            return np.empty(0, dtype=np.int64)
        return tokens[end + 1 : end + 1 + k].copy()

    def propose_batch(
        self, batch_token_ids: Sequence[Sequence[int] | np.ndarray], num_tokens: Sequence[int] | None = None
    ) -> list[np.ndarray]:
        """propose() for each sequence; lengths differ, so the caller pads with num_draft_tokens."""
        caps = num_tokens if num_tokens is not None else [None] * len(batch_token_ids)
        return [self.propose(tokens, cap) for tokens, cap in zip(batch_token_ids, caps, strict=True)]


def _best_match_end(tokens: np.ndarray, min_n: int, max_n: int) -> int:
    """Index j < L-1 where the longest (then most recent) earlier n-gram matching the suffix ends; -1 if none."""
    length = len(tokens)
    max_n = min(max_n, length - 1)  # the suffix itself needs n tokens, an earlier copy at least one more
    if max_n < min_n:
        return -1
    # Only positions holding the last token can end a match; extending those few is cheaper than all L.
    ends = np.flatnonzero(tokens[: length - 1] == tokens[length - 1])
    match_len = np.ones(len(ends), dtype=np.int64)
    still_matching = np.ones(len(ends), dtype=bool)
    for d in range(1, max_n):  # max_n is a handful; each pass is vectorized over the candidates
        shifted = ends - d
        still_matching &= (shifted >= 0) & (tokens[np.maximum(shifted, 0)] == tokens[length - 1 - d])
        match_len += still_matching
    if len(ends) == 0 or int(match_len.max()) < min_n:
        return -1
    return int(ends[np.flatnonzero(match_len == match_len.max())[-1]])
