"""Speculative decoding inside the continuous batch.

Per step, for decoding sequences that qualify (no penalties, logprobs or grammar, past min_tokens, room left) and
that the adaptive controller lets speculate (seeded requests always do, and take the step's spare token budget
first, so their output does not depend on the batch as long as the budget and the KV pool have room for their
drafts; a step with neither gives them none, and rejection sampling then draws from their generators differently):
  1. propose up to k draft tokens: n-gram prompt lookup, or k greedy steps of a draft model;
  2. the target scores the sequence's pending token plus its drafts in the step's one forward pass (the sequence
     rides the prefill-chunk attention path, beside plain decodes and prefill chunks);
  3. rejection_sample() keeps an accepted prefix plus one corrected or bonus token; greedy rows keep drafts that
     equal the target's argmax, so greedy output is unchanged token for token;
  4. KV slots of rejected drafts are rolled back: num_computed_tokens counts only verified tokens, blocks past them
     are freed, and the prefix cache only ever hashes computed tokens.
Draft proposals are greedy (a point mass q), which keeps verification exact for sampled requests too.

The draft model keeps its own paged KV cache with the *same block ids* as the target's (a mirror pool), so it
reuses the target's block tables, prefix hits, forks and copy-on-write; it catches up lazily on the tokens it has
not seen (`Sequence.num_draft_computed`), which a preemption resets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.kv_cache_manager import KVCacheManager
from engine.sampler import Sampler
from engine.sequence import Sequence
from engine.spec_decode.acceptance import AdaptiveConfig, SpecCostModel, SpecDecodeController
from engine.spec_decode.metrics import SpecDecodeStats
from engine.spec_decode.ngram_proposer import NgramConfig, NgramProposer
from engine.spec_decode.rejection_sampler import rejection_sample


@dataclass
class DraftView:
    """What the model runner needs of a sequence, with the draft model's progress instead of the target's."""

    seq_id: int
    token_ids: list[int]
    num_computed_tokens: int
    block_table: list = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


class DraftModelProposer:
    def __init__(self, runner):
        self.runner = runner  # a ModelRunner over the draft model and its mirror KV cache

    def propose(self, seqs: list[Sequence], num_drafts: list[int]) -> list[list[int]]:
        views = [DraftView(s.seq_id, list(s.token_ids), min(s.num_draft_computed, s.num_computed_tokens), s.block_table)
                 for s in seqs]  # fmt: skip
        for step in range(max(num_drafts, default=0)):
            active = [v for v, n in zip(views, num_drafts) if n > step]
            logits, inputs = self.runner.execute([(v, v.num_tokens - v.num_computed_tokens) for v in active])
            for view, token in zip(inputs.sample_seqs, logits.argmax(-1).tolist()):
                view.num_computed_tokens = view.num_tokens
                view.token_ids.append(token)
        for seq, view in zip(seqs, views):
            seq.num_draft_computed = view.num_computed_tokens
        return [v.token_ids[s.num_tokens :] for s, v in zip(seqs, views)]


class Speculator:
    def __init__(
        self,
        method: str,
        num_speculative_tokens: int,
        kv: KVCacheManager,
        sampler: Sampler,
        max_model_len: int,
        max_num_batched_tokens: int,
        adaptive: bool,
        draft_runner=None,
        draft_cost_ratio: float = 0.0,
    ):
        self.k = num_speculative_tokens
        self.kv = kv
        self.sampler = sampler
        self.max_model_len = max_model_len
        self.max_num_batched_tokens = max_num_batched_tokens
        self.ngram = NgramProposer(NgramConfig(num_speculative_tokens=self.k)) if method == "ngram" else None
        self.draft = DraftModelProposer(draft_runner) if method == "draft" else None
        cost = SpecCostModel(draft_cost_ratio=draft_cost_ratio)
        self.controller = (
            SpecDecodeController(AdaptiveConfig(num_speculative_tokens=self.k, cost=cost)) if adaptive else None
        )
        self.stats = SpecDecodeStats(num_speculative_tokens=self.k)

    # -- 1. propose -------------------------------------------------------------------------------------------
    def propose(self, scheduled: list[tuple[Sequence, int]], num_batched_tokens: int) -> dict[int, list[int]]:
        candidates = [s for s, n in scheduled if n == 1 and self._eligible(s)]
        if not candidates:
            return {}
        if self.controller is not None:
            num_prefill_tokens = sum(n for _, n in scheduled if n > 1)
            decisions = self.controller.decide([s.request.request_id for s in candidates], num_prefill_tokens)
            candidates = [s for s, on in zip(candidates, decisions) if on or s.request.params.seed is not None]
        candidates.sort(key=lambda s: s.request.params.seed is None)  # seeded first: stable, so order is kept
        budget = self.max_num_batched_tokens - num_batched_tokens
        drafts: dict[int, list[int]] = {}
        if self.draft is not None:
            # The draft model writes KV for its own proposals, so their slots come first.
            seqs, caps = [], []
            for seq in candidates:
                cap = min(self.k, self._room(seq), budget)
                if cap > 0 and self.kv.allocate_slots(seq, 1 + cap):
                    seqs.append(seq)
                    caps.append(cap)
                    budget -= cap
            for seq, draft in zip(seqs, self.draft.propose(seqs, caps)):
                drafts[seq.seq_id] = draft
            return drafts
        assert self.ngram is not None  # the proposer when there is no draft model
        for seq in candidates:
            cap = min(self.k, self._room(seq), budget)
            draft = self.ngram.propose(seq.token_ids, cap).tolist() if cap > 0 else []
            # Slots only for a real proposal; without room in the pool the sequence just decodes this step.
            if draft and self.kv.allocate_slots(seq, 1 + len(draft)):
                drafts[seq.seq_id] = draft
                budget -= len(draft)
        return drafts

    def _eligible(self, seq: Sequence) -> bool:
        params = seq.request.params
        return (
            seq.request.forked  # its siblings (n > 1) fork on the plain sampling path, at the end of the prompt
            and seq.num_computed_tokens == seq.num_tokens - 1
            and not params.adjusts_logits
            and params.logprobs is None
            and seq.num_output_tokens >= params.min_tokens
            # Structured output decodes without drafts: a draft's grammar mask depends on the drafts before it, so
            # verifying one takes a matcher rollback per position; plain sampling under the mask is exact as is.
            and params.structured is None
        )

    def _room(self, seq: Sequence) -> int:
        """Drafts that can still be used: verification emits accepted drafts + 1 token."""
        left_by_max_tokens = seq.request.max_tokens - seq.num_output_tokens
        left_by_context = self.max_model_len - seq.num_tokens
        return min(left_by_max_tokens, left_by_context) - 1

    # -- 3. verify --------------------------------------------------------------------------------------------
    def verify(self, seqs: list[Sequence], logits: list[torch.Tensor], drafts: dict[int, list[int]]) -> list[list[int]]:
        """logits[i]: [k_i + 1, V] target logits of seqs[i]'s pending token and drafts -> tokens to append."""
        num_draft = [len(drafts[s.seq_id]) for s in seqs]
        k = max(num_draft)
        vocab = logits[0].shape[-1]
        device = logits[0].device
        target = torch.zeros(len(seqs), k + 1, vocab, device=device)
        draft_ids = torch.zeros(len(seqs), k, dtype=torch.long)
        greedy = []
        for i, (seq, rows) in enumerate(zip(seqs, logits)):
            params = seq.request.params
            greedy.append(params.greedy)
            target[i, : rows.shape[0]] = rows if params.greedy else self.sampler.probs(rows, params)
            draft_ids[i, : num_draft[i]] = torch.tensor(drafts[seq.seq_id])
        out = rejection_sample(
            draft_ids,
            torch.tensor(num_draft),
            target,
            is_greedy=torch.tensor(greedy, device=device),
            generators=[s.generator for s in seqs],
            generator=self.sampler.generator,
        )
        accepted = out.num_accepted.tolist()
        self.stats.observe(num_draft, accepted)
        tokens = out.output_token_ids.tolist()
        if self.controller is not None:
            for seq, n, a in zip(seqs, num_draft, accepted):
                self.controller.record(seq.request.request_id, n, a)
        return [row[: a + 1] for row, a in zip(tokens, accepted)]

    def finish(self, request_id: str) -> None:
        if self.controller is not None:
            self.controller.finish(request_id)
