"""Exact speculative sampling (Leviathan et al. 2023, Chen et al. 2023), batched and without loops over k or V.

Notation, used in every name here: `target_probs` (p) is the TARGET model's distribution after temperature, top-k,
top-p and min-p; the output must follow it exactly. `draft_probs` (q) is the PROPOSER's distribution that drew the
draft tokens (a point mass for n-gram proposals). Issue 8 and some papers swap the two letters; this module never does.

For one sequence with draft tokens x_0 .. x_{n-1}, x_i ~ q_i:

    accept x_i with probability min(1, p_i(x_i) / q_i(x_i)), in order, up to the first rejection at position r;
    at r emit one token from normalize(max(0, p_r - q_r)), the residual;
    if all n were accepted (r == n) emit a bonus token from p_n.

Each emitted token then follows p given the tokens before it, so speculation never changes what a request can
generate. Greedy rows (temperature 0) accept x_i iff it is argmax p_i and emit argmax p_r.

Padded batch layout, S sequences, k = the batch's largest draft length, V = vocabulary size:

    draft_token_ids   [S, k]       int64; positions >= num_draft_tokens[s] are padding and ignored
    num_draft_tokens  [S]          int64 in [0, k]; 0 means "no speculation": one token sampled from p_0
    draft_probs       [S, k, V]    float, or None when every proposal is a point mass (n-gram)
    target_probs      [S, k+1, V]  float; row num_draft_tokens[s] is the bonus position, later rows are ignored.
                                   Greedy rows may hold logits instead: only their argmax is used.
    output_token_ids  [S, k+1]     int64: accepted drafts, then the recovered or bonus token, then PLACEHOLDER_TOKEN_ID

Categorical draws use the exponential race: argmax_v w_v / E_v with E_v ~ Exp(1) i.i.d. picks v with probability
w_v / sum(w), so the residual needs no normalization pass and the whole batch samples in one kernel.

Randomness: a row with a torch.Generator draws exactly num_draft_tokens[s] uniforms and then V exponentials from
it, whatever else is in the batch, so seeded requests reproduce. Rows without one share `generator` (the engine's,
as in engine/sampler.py) in one batched draw, or torch's default generator when that is None. Generators must live
on target_probs' device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

PLACEHOLDER_TOKEN_ID = -1


@dataclass
class RejectionSamplerOutput:
    output_token_ids: torch.Tensor
    """[S, k+1] int64: the first num_accepted[s] + 1 entries of row s are emitted, the rest are PLACEHOLDER_TOKEN_ID."""
    num_accepted: torch.Tensor
    """[S] int64: draft tokens accepted per sequence, in [0, num_draft_tokens[s]]."""


def rejection_sample(
    draft_token_ids: torch.Tensor,
    num_draft_tokens: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None = None,
    is_greedy: torch.Tensor | None = None,
    generators: Sequence[torch.Generator | None] | None = None,
    generator: torch.Generator | None = None,
) -> RejectionSamplerOutput:
    """Verify a batch of drafts against the target; see the module docstring for shapes and the algorithm.

    is_greedy: [S] bool, True for temperature-0 rows. generators: one entry per row (None: unseeded) or None.
    generator: the source for unseeded rows.
    """
    _check_shapes(draft_token_ids, num_draft_tokens, target_probs, draft_probs, is_greedy, generators)
    num_seqs, k = draft_token_ids.shape
    device = target_probs.device
    draft_token_ids, num_draft_tokens = draft_token_ids.to(device), num_draft_tokens.to(device)
    rows = torch.arange(num_seqs, device=device)
    valid = torch.arange(k, device=device) < num_draft_tokens[:, None]  # [S, k]
    drafts = torch.where(valid, draft_token_ids, 0)  # padding points at token 0 so gathers stay in range

    uniforms, exponentials = _random_draws(
        (num_seqs, k, target_probs.shape[-1]), num_draft_tokens, generators, generator, device
    )
    p_at_draft = target_probs[:, :k].gather(2, drafts[..., None]).squeeze(2).float()  # [S, k]
    if draft_probs is None:
        q_at_draft = torch.ones_like(p_at_draft)
    else:
        q_at_draft = draft_probs.gather(2, drafts[..., None]).squeeze(2).float()
    accepted = _accept(p_at_draft, q_at_draft, uniforms)
    if is_greedy is not None:
        greedy_accepted = drafts == target_probs[:, :k].argmax(-1)
        accepted = torch.where(is_greedy[:, None], greedy_accepted, accepted)
    # The accepted prefix ends at the first rejection or the first padding position.
    num_accepted = (accepted & valid).long().cumprod(1).sum(1)  # [S]

    # One more token per row, at position r = num_accepted: from the residual after a rejection, from p_r itself
    # at the bonus position (r == n), where q is taken as zero so the residual reduces to p_r.
    p_stop = target_probs[rows, num_accepted].float()  # [S, V]
    q_stop = _draft_probs_at(draft_probs, drafts, rows, num_accepted, num_draft_tokens, p_stop)  # [S, V]
    recovered = (_residual(p_stop, q_stop) / exponentials).argmax(-1)  # [S]
    if is_greedy is not None:
        recovered = torch.where(is_greedy, p_stop.argmax(-1), recovered)

    output = torch.full((num_seqs, k + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.long, device=device)
    output[:, :k] = torch.where(torch.arange(k, device=device) < num_accepted[:, None], drafts, PLACEHOLDER_TOKEN_ID)
    output.scatter_(1, num_accepted[:, None], recovered[:, None])
    return RejectionSamplerOutput(output_token_ids=output, num_accepted=num_accepted)


def _accept(p_at_draft: torch.Tensor, q_at_draft: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """u < p/q, written without the division: q = 0 < p accepts (the ratio is infinite); p = 0 never accepts."""
    return uniforms * q_at_draft < p_at_draft


def _residual(p_stop: torch.Tensor, q_stop: torch.Tensor) -> torch.Tensor:
    """max(0, p - q), unnormalized (the exponential race does not need it). When rounding leaves it all zero (p and q
    equal up to float error, so a rejection was a rounding artefact too), p itself is the right distribution."""
    residual = (p_stop - q_stop).clamp_min_(0.0)
    empty = residual.sum(-1, keepdim=True) <= 0.0
    return torch.where(empty, p_stop, residual)


def _draft_probs_at(
    draft_probs: torch.Tensor | None,
    drafts: torch.Tensor,
    rows: torch.Tensor,
    num_accepted: torch.Tensor,
    num_draft_tokens: torch.Tensor,
    like: torch.Tensor,
) -> torch.Tensor:
    """q at each row's stop position [S, V]; all zero for rows that stopped at their bonus position."""
    k = drafts.shape[1]
    rejected = num_accepted < num_draft_tokens  # [S]
    if k == 0:
        return torch.zeros_like(like)
    position = num_accepted.clamp(max=k - 1)
    if draft_probs is None:
        q_stop = torch.zeros_like(like)
        q_stop.scatter_(1, drafts[rows, position][:, None], 1.0)
    else:
        q_stop = draft_probs[rows, position].float()
    return q_stop * rejected[:, None]


def _random_draws(
    shape: tuple[int, int, int],
    num_draft_tokens: torch.Tensor,
    generators: Sequence[torch.Generator | None] | None,
    generator: torch.Generator | None,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Uniforms [S, k] for the accept tests and Exp(1) draws [S, V] for the one categorical sample per row."""
    num_seqs, k, vocab_size = shape
    uniforms = torch.zeros(num_seqs, k, device=device)
    exponentials = torch.empty(num_seqs, vocab_size, device=device)
    seeded = [(s, g) for s, g in enumerate(generators or ()) if g is not None]
    if not seeded:
        uniforms.uniform_(generator=generator)
        exponentials.exponential_(generator=generator)
    else:
        # `generator` draws only for the unseeded rows. A seeded row's uniforms past its drafts stay 0: padding,
        # never accepted.
        assert generators is not None  # `seeded` came from them
        unseeded = [s for s, g in enumerate(generators) if g is None]
        if unseeded:
            rows = torch.tensor(unseeded, device=device)
            uniforms[rows] = torch.rand(len(unseeded), k, device=device, generator=generator)
            exponentials[rows] = torch.empty(len(unseeded), vocab_size, device=device).exponential_(generator=generator)
        counts = num_draft_tokens.tolist()  # one host sync, only when some row is seeded
        for s, seeded_generator in seeded:
            uniforms[s, : counts[s]] = torch.rand(counts[s], device=device, generator=seeded_generator)
            exponentials[s].exponential_(generator=seeded_generator)
    # Exp(1) can round to 0.0; w / 0 would be inf (or nan for w = 0) and win the race regardless of w.
    return uniforms, exponentials.clamp_min_(torch.finfo(exponentials.dtype).tiny)


def _check_shapes(
    draft_token_ids: torch.Tensor,
    num_draft_tokens: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    is_greedy: torch.Tensor | None,
    generators: Sequence[torch.Generator | None] | None,
) -> None:
    num_seqs, k = draft_token_ids.shape
    if target_probs.dim() != 3 or target_probs.shape[:2] != (num_seqs, k + 1):
        raise ValueError(f"target_probs has shape {tuple(target_probs.shape)}; expected [{num_seqs}, {k + 1}, V]")
    if draft_probs is not None and draft_probs.shape != (num_seqs, k, target_probs.shape[2]):
        raise ValueError(
            f"draft_probs has shape {tuple(draft_probs.shape)}; expected [{num_seqs}, {k}, {target_probs.shape[2]}]"
        )
    if num_draft_tokens.shape != (num_seqs,):
        raise ValueError(f"num_draft_tokens has shape {tuple(num_draft_tokens.shape)}; expected [{num_seqs}]")
    if is_greedy is not None and is_greedy.shape != (num_seqs,):
        raise ValueError(f"is_greedy has shape {tuple(is_greedy.shape)}; expected [{num_seqs}]")
    if generators is not None and len(generators) != num_seqs:
        raise ValueError(f"got {len(generators)} generators for {num_seqs} sequences; pass one per row (or None)")
