"""The rejection sampler is exact: what it emits follows the target distribution, whatever the draft.

Statistical tests use scipy's chi-square goodness of fit on 20,000 trials with fixed seeds. A correct sampler must
give p > 1e-3 at every checked position; each deliberately broken variant must give p < 1e-6 somewhere, which shows
the test has the power to catch the mistakes people actually make.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from engine.spec_decode import rejection_sampler
from engine.spec_decode.rejection_sampler import PLACEHOLDER_TOKEN_ID, rejection_sample

NUM_TRIALS = 20_000
EXACT_MIN_PVALUE = 1e-3
BROKEN_MAX_PVALUE = 1e-6


def _dirichlet(rng: np.random.Generator, num_rows: int, vocab_size: int) -> np.ndarray:
    return rng.dirichlet(np.ones(vocab_size), size=num_rows)


def _normalized(weights: list[list[float]]) -> np.ndarray:
    array = np.asarray(weights, dtype=np.float64)
    return array / array.sum(-1, keepdims=True)


def _sparse(vocab_size: int, mass: dict[int, float]) -> list[float]:
    row = [0.0] * vocab_size
    for token, weight in mass.items():
        row[token] = weight
    return row


def _cases() -> dict[str, tuple[np.ndarray, np.ndarray | None, list[int] | None]]:
    """name -> (target p [k+1, V], draft q [k, V] or None for one-hot drafts, fixed one-hot draft ids or None)."""
    rng = np.random.default_rng(7)
    v = 8
    overlapping = (_dirichlet(rng, 4, v), _dirichlet(rng, 3, v), None)
    disjoint = (
        _normalized([[0, 0, 0, 0, 1, 2, 3, 4]] * 4),
        _normalized([[4, 3, 2, 1, 0, 0, 0, 0]] * 3),
        None,
    )
    big_v = 256  # mass on the first and last token ids, where off-by-one errors live
    edges = (
        _normalized([_sparse(big_v, {0: 3, 255: 2, 128: 1})] * 4),
        _normalized([_sparse(big_v, {0: 1, 1: 1, 254: 1, 255: 4})] * 3),
        None,
    )
    same = _dirichlet(rng, 4, v)
    equal = (same, same[:3].copy(), None)
    partial_support = (
        _normalized([[1, 1, 1, 1, 1, 0, 0, 3]] * 4),
        _normalized([[0, 2, 0, 1, 3, 3, 1, 0]] * 3),
        None,
    )
    one_hot = (_normalized([[1, 2, 0, 3, 1, 1, 1, 4]] * 4), None, [7, 0, 3])
    return {
        "overlapping": overlapping,
        "disjoint": disjoint,
        "vocab_edges": edges,
        "draft_equals_target": equal,
        "partial_support": partial_support,
        "ngram_one_hot": one_hot,
    }


def _run(case, seed: int, ragged: bool) -> tuple[rejection_sampler.RejectionSamplerOutput, np.ndarray]:
    target, draft, fixed_drafts = case
    k, vocab_size = target.shape[0] - 1, target.shape[1]
    gen = torch.Generator().manual_seed(seed)
    target_probs = torch.tensor(target, dtype=torch.float32).expand(NUM_TRIALS, k + 1, vocab_size)
    if draft is None:
        draft_probs = None
        drafts = torch.tensor(fixed_drafts).expand(NUM_TRIALS, k)
    else:
        draft_probs = torch.tensor(draft, dtype=torch.float32).expand(NUM_TRIALS, k, vocab_size)
        columns = [torch.multinomial(draft_probs[0, i], NUM_TRIALS, True, generator=gen) for i in range(k)]
        drafts = torch.stack(columns, 1)
    if ragged:
        num_draft_tokens = torch.randint(0, k + 1, (NUM_TRIALS,), generator=gen)
    else:
        num_draft_tokens = torch.full((NUM_TRIALS,), k)
    torch.manual_seed(seed + 1)
    return rejection_sample(drafts, num_draft_tokens, target_probs, draft_probs), target


def _pvalue(tokens: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square p-value of tokens against probs; 0.0 if any token lies outside probs' support."""
    counts = np.bincount(tokens, minlength=len(probs))
    support = probs > 0
    if counts[~support].sum() > 0:
        return 0.0
    expected = probs[support] / probs[support].sum() * len(tokens)
    return float(chisquare(counts[support], expected).pvalue)


def _position_pvalues(output: rejection_sampler.RejectionSamplerOutput, target: np.ndarray) -> list[float]:
    """p-value of the token emitted at each position j, among the trials that reached j (accepted j drafts)."""
    tokens, num_accepted = output.output_token_ids.numpy(), output.num_accepted.numpy()
    pvalues = []
    for position in range(target.shape[0]):
        reached = tokens[num_accepted >= position, position]
        if len(reached) * target[position][target[position] > 0].min() < 5:
            continue  # too few trials for chi-square's expected counts at this position
        pvalues.append(_pvalue(reached, target[position]))
    return pvalues


@pytest.mark.parametrize("ragged", [False, True], ids=["full", "ragged"])
@pytest.mark.parametrize("name", list(_cases()))
def test_emitted_tokens_follow_the_target(name: str, ragged: bool) -> None:
    output, target = _run(_cases()[name], seed=11, ragged=ragged)
    pvalues = _position_pvalues(output, target)
    assert pvalues, "no position had enough trials to test"
    assert min(pvalues) > EXACT_MIN_PVALUE, pvalues


def test_disjoint_supports_reject_every_draft() -> None:
    output, _ = _run(_cases()["disjoint"], seed=3, ragged=False)
    assert output.num_accepted.eq(0).all()


def test_identical_distributions_accept_every_draft() -> None:
    target = _dirichlet(np.random.default_rng(1), 4, 8)
    # float32 rounding makes p/q differ from 1 by an ulp at most; acceptance must still be (nearly) certain
    output, _ = _run((target, target[:3].copy(), None), seed=5, ragged=False)
    assert output.num_accepted.float().mean() > 2.999


BROKEN_VARIANTS = {
    # the correction drawn from p instead of max(0, p - q): over-emits tokens the draft already favoured
    "residual_from_target": ("_residual", lambda p, q: p),
    # the residual with the roles swapped, max(0, q - p): the issue's own letters read the wrong way round
    "residual_swapped": ("_residual", lambda p, q: (q - p).clamp_min(0.0) + 1e-12),
    # acceptance ratio inverted, min(1, q/p)
    "ratio_inverted": ("_accept", lambda p, q, u: u * p < q),
    # every draft accepted: the output follows the draft, not the target
    "accept_all": ("_accept", lambda p, q, u: torch.ones_like(p, dtype=torch.bool)),
}


@pytest.mark.parametrize("variant", list(BROKEN_VARIANTS))
def test_the_statistic_rejects_broken_samplers(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    name, broken = BROKEN_VARIANTS[variant]
    monkeypatch.setattr(rejection_sampler, name, broken)
    output, target = _run(_cases()["overlapping"], seed=11, ragged=False)
    assert min(_position_pvalues(output, target)) < BROKEN_MAX_PVALUE


def _greedy_reference(drafts: torch.Tensor, num_draft: torch.Tensor, logits: torch.Tensor) -> list[list[int]]:
    """The argmax path, one token at a time: keep drafts while they equal the target's argmax, then its argmax."""
    rows = []
    for s in range(drafts.shape[0]):
        emitted = []
        for i in range(int(num_draft[s]) + 1):
            best = int(logits[s, i].argmax())
            emitted.append(best)
            if i == int(num_draft[s]) or int(drafts[s, i]) != best:
                break
        rows.append(emitted)
    return rows


def _greedy_batch(num_seqs: int, k: int, vocab_size: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_seqs, k + 1, vocab_size, generator=gen)
    drafts = logits[:, :k].argmax(-1)
    corrupt = torch.rand(num_seqs, k, generator=gen) < 0.25
    drafts = torch.where(corrupt, torch.randint(0, vocab_size, (num_seqs, k), generator=gen), drafts)
    num_draft = torch.randint(0, k + 1, (num_seqs,), generator=gen)
    return drafts, num_draft, logits


def _emitted(output: rejection_sampler.RejectionSamplerOutput) -> list[list[int]]:
    return [row[: int(n) + 1].tolist() for row, n in zip(output.output_token_ids, output.num_accepted, strict=True)]


def test_greedy_verification_follows_the_argmax_path() -> None:
    drafts, num_draft, logits = _greedy_batch(256, 5, 50, seed=0)
    draft_probs = torch.softmax(torch.randn(256, 5, 50), -1)
    output = rejection_sample(drafts, num_draft, logits, draft_probs, is_greedy=torch.ones(256, dtype=torch.bool))
    assert _emitted(output) == _greedy_reference(drafts, num_draft, logits)
    after_last = output.num_accepted[:, None] < torch.arange(5)
    assert (output.output_token_ids[:, 1:][after_last] == PLACEHOLDER_TOKEN_ID).all()


def test_greedy_rows_are_unaffected_by_sampled_rows_in_the_batch() -> None:
    drafts, num_draft, logits = _greedy_batch(64, 4, 30, seed=1)
    is_greedy = torch.arange(64) % 2 == 0
    probs = torch.where(is_greedy[:, None, None], logits, torch.softmax(logits, -1))
    output = rejection_sample(drafts, num_draft, probs, None, is_greedy=is_greedy)
    reference = _greedy_reference(drafts, num_draft, logits)
    emitted = _emitted(output)
    assert [emitted[s] for s in range(0, 64, 2)] == [reference[s] for s in range(0, 64, 2)]


def _seeded_row(seed: int):
    gen = torch.Generator().manual_seed(seed)
    target = torch.softmax(torch.randn(4, 20, generator=gen), -1)
    draft = torch.softmax(torch.randn(3, 20, generator=gen), -1)
    drafts = torch.multinomial(draft, 1, generator=gen).squeeze(1)
    return drafts, target, draft


def _pad(tensor: torch.Tensor, length: int) -> torch.Tensor:
    padding = torch.zeros(length - tensor.shape[0], *tensor.shape[1:], dtype=tensor.dtype)
    return torch.cat([tensor, padding])


def _batch_with_seeded_row(row, index: int, num_seqs: int, k: int, seed: int, noise_seed: int):
    """A batch of `num_seqs` rows with draft length k; row `index` is `row` with its own generator."""
    drafts, target, draft = row
    gen = torch.Generator().manual_seed(noise_seed)
    all_drafts = torch.randint(0, 20, (num_seqs, k), generator=gen)
    all_target = torch.softmax(torch.randn(num_seqs, k + 1, 20, generator=gen), -1)
    all_draft = torch.softmax(torch.randn(num_seqs, k, 20, generator=gen), -1)
    all_drafts[index], all_target[index], all_draft[index] = _pad(drafts, k), _pad(target, k + 1), _pad(draft, k)
    num_draft = torch.full((num_seqs,), k)
    num_draft[index] = 3
    generators = [None] * num_seqs
    generators[index] = torch.Generator().manual_seed(seed)
    torch.manual_seed(noise_seed)  # unseeded rows draw from the global generator; it must not leak into the seeded one
    output = rejection_sample(all_drafts, num_draft, all_target, all_draft, generators=generators)
    n = int(output.num_accepted[index])
    return output.output_token_ids[index, : n + 1].tolist()


def test_seeded_rows_reproduce_whatever_the_batch() -> None:
    for row_seed in range(20):
        row = _seeded_row(row_seed)
        first = _batch_with_seeded_row(row, index=0, num_seqs=3, k=3, seed=1000 + row_seed, noise_seed=1)
        second = _batch_with_seeded_row(row, index=5, num_seqs=8, k=6, seed=1000 + row_seed, noise_seed=2)
        assert first == second


def test_different_seeds_give_different_samples() -> None:
    row = _seeded_row(0)
    outputs = {
        tuple(_batch_with_seeded_row(row, index=0, num_seqs=1, k=3, seed=seed, noise_seed=0)) for seed in range(40)
    }
    assert len(outputs) > 3


def test_the_engine_generator_drives_unseeded_rows() -> None:
    drafts, num_draft, logits = _greedy_batch(32, 3, 20, seed=4)
    probs = torch.softmax(logits, -1)
    outputs = [
        rejection_sample(drafts, num_draft, probs, generator=torch.Generator().manual_seed(seed)).output_token_ids
        for seed in (5, 5, 6)
    ]
    assert torch.equal(outputs[0], outputs[1])
    assert not torch.equal(outputs[0], outputs[2])


def test_no_drafts_samples_from_the_first_position() -> None:
    target = _normalized([[1, 0, 2, 0, 3, 4]])
    probs = torch.tensor(target, dtype=torch.float32).expand(NUM_TRIALS, 1, 6)
    torch.manual_seed(0)
    no_drafts = torch.zeros(NUM_TRIALS, 0, dtype=torch.long)
    output = rejection_sample(no_drafts, torch.zeros(NUM_TRIALS, dtype=torch.long), probs)
    assert output.output_token_ids.shape == (NUM_TRIALS, 1)
    assert _pvalue(output.output_token_ids[:, 0].numpy(), target[0]) > EXACT_MIN_PVALUE


def test_shape_errors_name_the_expected_shape() -> None:
    with pytest.raises(ValueError, match=r"expected \[2, 4, V\]"):
        rejection_sample(torch.zeros(2, 3, dtype=torch.long), torch.full((2,), 3), torch.rand(2, 3, 10))
    with pytest.raises(ValueError, match="one per row"):
        rejection_sample(
            torch.zeros(2, 3, dtype=torch.long), torch.full((2,), 3), torch.rand(2, 4, 10), generators=[None]
        )


def test_the_engine_generator_draws_only_for_unseeded_rows() -> None:
    """A seeded row takes its randomness from its own generator alone, so the engine's draws only the unseeded
    rows' uniforms and exponentials (it used to draw them for every row and throw the seeded rows' away)."""
    num_seqs, k, vocab_size = 5, 3, 20
    drafts, num_draft, logits = _greedy_batch(num_seqs, k, vocab_size, seed=6)
    generators = [None, torch.Generator().manual_seed(1), None, torch.Generator().manual_seed(2), None]
    engine_generator = torch.Generator().manual_seed(9)
    rejection_sample(drafts, num_draft, torch.softmax(logits, -1), generators=generators, generator=engine_generator)
    expected = torch.Generator().manual_seed(9)
    torch.rand(3, k, generator=expected)
    torch.empty(3, vocab_size).exponential_(generator=expected)
    assert torch.equal(engine_generator.get_state(), expected.get_state())
