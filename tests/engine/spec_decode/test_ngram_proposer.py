from __future__ import annotations

import numpy as np
import pytest

from engine.spec_decode.ngram_proposer import NgramConfig, NgramProposer


def _propose(tokens: list[int], k: int = 2, min_n: int = 1, max_n: int = 3, **kwargs) -> list[int]:
    proposer = NgramProposer(NgramConfig(num_speculative_tokens=k, min_n=min_n, max_n=max_n, **kwargs))
    return proposer.propose(tokens).tolist()


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        ([1, 2, 3, 4, 1, 2, 3], [4, 1]),  # the full suffix repeats: propose what followed it
        ([1, 2, 9, 1, 2, 8, 1, 2], [8, 1]),  # two equally long matches: the most recent wins
        ([5, 1, 2, 7, 3, 2, 8, 5, 1, 2], [7, 3]),  # a longer match beats a more recent shorter one
        ([7, 8, 9, 7, 8], [9, 7]),  # a match may start at position 0
        ([1, 2, 1], [2, 1]),  # the continuation may run into the suffix itself
        ([4, 5, 6, 4], [5, 6]),
        ([3, 3, 3, 3], [3]),  # the most recent copy ends one token before the suffix does
        ([1, 2, 3, 4], []),  # nothing repeats
        ([9], []),
        ([], []),
    ],
)
def test_proposals_on_hand_made_sequences(tokens: list[int], expected: list[int]) -> None:
    assert _propose(tokens) == expected


def test_proposal_is_shorter_near_the_end_of_the_sequence() -> None:
    assert _propose([6, 1, 2, 6], k=5) == [1, 2, 6]


def test_min_n_rejects_short_matches() -> None:
    assert _propose([1, 2, 3, 9, 3], min_n=2) == []
    assert _propose([1, 2, 3, 9, 2, 3], min_n=2) == [9, 2]


def test_max_n_caps_the_match_length() -> None:
    # with max_n=1 only the last token is matched, so the most recent occurrence of 3 wins over the longer match
    assert _propose([1, 2, 3, 7, 0, 3, 8, 1, 2, 3], max_n=1) == [8, 1]
    assert _propose([1, 2, 3, 7, 0, 3, 8, 1, 2, 3], max_n=3) == [7, 0]


def test_lookback_window_bounds_the_search() -> None:
    tokens = [5, 6, 7, 9, 8, 4, 2, 5, 6]
    assert _propose(tokens, k=1, max_n=2) == [7]
    assert _propose(tokens, k=1, max_n=2, max_lookback_tokens=6) == []


def test_per_call_cap_and_batch() -> None:
    proposer = NgramProposer(NgramConfig(num_speculative_tokens=3, max_n=2))
    batch = [[1, 2, 3, 4, 1, 2], np.array([5, 5]), [8]]
    proposals = proposer.propose_batch(batch, num_tokens=[1, 3, 3])
    assert [p.tolist() for p in proposals] == [[3], [5], []]
    assert all(p.dtype == np.int64 for p in proposals)


def _reference(tokens: list[int], k: int, min_n: int, max_n: int) -> list[int]:
    """The definition, written plainly: longest n first, then the most recent earlier occurrence."""
    for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
        suffix = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start : start + n] == suffix:
                return tokens[start + n : start + n + k]
    return []


def test_matches_the_plain_definition_on_random_sequences() -> None:
    rng = np.random.default_rng(0)
    for _ in range(500):
        length, vocab = int(rng.integers(0, 40)), int(rng.integers(2, 6))
        tokens = rng.integers(0, vocab, length).tolist()
        min_n = int(rng.integers(1, 4))
        max_n = min_n + int(rng.integers(0, 3))
        k = int(rng.integers(1, 6))
        assert _propose(tokens, k=k, min_n=min_n, max_n=max_n) == _reference(tokens, k, min_n, max_n), tokens


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_speculative_tokens": 0}, "at least 1"),
        ({"min_n": 3, "max_n": 2}, "min_n <= max_n"),
        ({"min_n": 0}, "min_n <= max_n"),
        ({"max_lookback_tokens": -1}, "max_lookback_tokens"),
    ],
)
def test_config_errors_name_the_value(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NgramConfig(**kwargs)
