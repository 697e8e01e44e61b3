"""Speculative decoding inside the continuous batch.

Per step, for decoding sequences that qualify (no penalties or logprobs, past min_tokens, room left) and that the
adaptive controller lets speculate (seeded requests always do, and take the step's spare token budget first, so their
output does not depend on the batch as long as the budget and the KV pool have room for their drafts; a step with
neither gives them none, and rejection sampling then draws from their generators differently):
  1. propose up to k draft tokens: n-gram prompt lookup, or k greedy steps of a draft model;
  2. the target scores the sequence's pending token plus its drafts in the step's one forward pass (the sequence
     rides the prefill-chunk attention path, beside plain decodes and prefill chunks);
  3. rejection_sample() keeps an accepted prefix plus one corrected or bonus token; greedy rows keep drafts that
     equal the target's argmax, so greedy output is unchanged token for token;
  4. KV slots of rejected drafts are rolled back: num_computed_tokens counts only verified tokens, blocks past them
     are freed, and the prefix cache only ever hashes computed tokens.
Draft proposals are greedy (a point mass q), which keeps verification exact for sampled requests too.

Structured output (a grammar on the sequence, engine/structured/draft_masks.py) speculates too, and stays exact:
  1. a draft model drafts under the grammar (each of its steps masked by the matcher advanced through the drafts
     before it). Each draft is then walked through the sequence's matcher in one xgrammar call, which fills the mask
     of each of its verification positions and leaves the matcher as it was; the draft is cut before its first token
     the grammar rejects (before KV slots are reserved for it) and after a stop token, which it keeps;
  3. each position's logits are masked with that position's grammar mask before temperature, top-k/p and min-p, as
     plain decoding masks them: greedy rows keep exactly the tokens plain constrained decoding picks, sampled rows
     are verified against the masked distribution (a cut draft is still a point mass);
  4. the engine advances the matcher by the tokens kept (LLMEngine._append_tokens), as for sampled tokens; a kept
     stop token ends the sequence there. Matchers live on the sequence, so preemption and forks keep them.

The draft model keeps its own paged KV cache with the *same block ids* as the target's (a mirror pool), so it
reuses the target's block tables, prefix hits, forks and copy-on-write; it catches up lazily on the tokens it has
not seen (`Sequence.num_draft_computed`), which a preemption resets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import xgrammar as xgr

from engine.kv_cache_manager import KVCacheManager
from engine.sampler import Sampler
from engine.sequence import Sequence
from engine.spec_decode.acceptance import AdaptiveConfig, SpecCostModel, SpecDecodeController
from engine.spec_decode.metrics import SpecDecodeStats
from engine.spec_decode.ngram_proposer import NgramConfig, NgramProposer
from engine.spec_decode.rejection_sampler import rejection_sample
from engine.structured.draft_masks import DraftMasks, GrammarDrafting
from engine.structured.masker import GrammarMasker


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
    def __init__(self, runner, vocab_size: int):
        self.runner = runner  # a ModelRunner over the draft model and its mirror KV cache
        self.masker = GrammarMasker(vocab_size)  # constrained sequences draft under their grammar
        self.grammar_batch = xgr.BatchGrammarMatcher(1)  # advances and restores their matchers, one call a step

    def propose(self, seqs: list[Sequence], num_drafts: list[int]) -> list[list[int]]:
        views = [DraftView(s.seq_id, list(s.token_ids), min(s.num_draft_computed, s.num_computed_tokens), s.block_table)
                 for s in seqs]  # fmt: skip
        index = {v.seq_id: i for i, v in enumerate(views)}
        grammar = GrammarDrafting(self.masker, self.grammar_batch, [s.grammar for s in seqs])
        try:
            for step in range(max(num_drafts, default=0)):
                active = [v for v, n in zip(views, num_drafts) if n > step]
                logits, inputs = self.runner.execute([(v, v.num_tokens - v.num_computed_tokens) for v in active])
                rows = [index[v.seq_id] for v in inputs.sample_seqs]
                grammar.mask(logits, rows)
                tokens = logits.argmax(-1).tolist()
                grammar.advance(rows, tokens)
                for view, token in zip(inputs.sample_seqs, tokens):
                    view.num_computed_tokens = view.num_tokens
                    view.token_ids.append(token)
        finally:
            grammar.restore()  # the engine advances the matchers by the tokens verification keeps
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
        vocab_size: int,
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
        self.draft = DraftModelProposer(draft_runner, vocab_size) if method == "draft" else None
        self.grammar_masks = DraftMasks(vocab_size)  # the step's constrained drafts' verification masks
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
        if self.draft is not None:
            # The draft model writes KV for its own proposals, so their slots come first; those of drafts that a
            # grammar cuts stay unused, and the step's commit frees them.
            seqs, caps = [], []
            for seq in candidates:
                cap = min(self.k, self._room(seq), budget)
                if cap > 0 and self.kv.allocate_slots(seq, 1 + cap):
                    seqs.append(seq)
                    caps.append(cap)
                    budget -= cap
            return self._grammar_checked(seqs, dict(zip([s.seq_id for s in seqs], self.draft.propose(seqs, caps))))
        assert self.ngram is not None  # the proposer when there is no draft model
        # Proposals, then the grammars' cuts, then slots: the budget and the pool go to drafts that can be verified.
        proposals: dict[int, list[int]] = {}
        for seq in candidates:
            cap = min(self.k, self._room(seq), budget)
            proposals[seq.seq_id] = self.ngram.propose(seq.token_ids, cap).tolist() if cap > 0 else []
        proposals = self._grammar_checked(candidates, proposals)
        drafts: dict[int, list[int]] = {}
        for seq in candidates:
            draft = proposals.get(seq.seq_id, [])[: max(budget, 0)]  # what the budget left: the head a cap proposes
            # Slots only for a real proposal; without room in the pool the sequence just decodes this step.
            if draft and self.kv.allocate_slots(seq, 1 + len(draft)):
                drafts[seq.seq_id] = draft
                budget -= len(draft)
        return drafts

    def _grammar_checked(self, seqs: list[Sequence], proposals: dict[int, list[int]]) -> dict[int, list[int]]:
        """Each constrained draft cut before its first token the grammar rejects (their verification masks are
        filled on the way, the last step's forgotten); empty drafts left out."""
        constrained = [(s.seq_id, s.grammar) for s in seqs if s.grammar is not None and proposals[s.seq_id]]
        seq_ids = [seq_id for seq_id, _ in constrained]
        num_allowed = self.grammar_masks.check(
            seq_ids, [matcher for _, matcher in constrained], [proposals[seq_id] for seq_id in seq_ids]
        )
        for seq_id, n in zip(seq_ids, num_allowed):
            proposals[seq_id] = proposals[seq_id][:n]
        return {seq_id: draft for seq_id, draft in proposals.items() if draft}

    def _eligible(self, seq: Sequence) -> bool:
        params = seq.request.params
        return (
            seq.request.forked  # its siblings (n > 1) fork on the plain sampling path, at the end of the prompt
            and seq.num_computed_tokens == seq.num_tokens - 1
            and not params.adjusts_logits
            and params.logprobs is None
            and seq.num_output_tokens >= params.min_tokens
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
        for i, (seq, rows) in enumerate(zip(seqs, logits)):
            target[i, : rows.shape[0]] = rows
            draft_ids[i, : num_draft[i]] = torch.tensor(drafts[seq.seq_id])
        # Grammar masks first, then temperature, top-k/p and min-p, in plain sampling's order (LLMEngine).
        self.grammar_masks.apply(target, [s.seq_id for s in seqs], num_draft)
        greedy = [s.request.params.greedy for s in seqs]
        for i, seq in enumerate(seqs):
            if not greedy[i]:  # greedy rows keep their logits: only the argmax is read
                target[i, : num_draft[i] + 1] = self.sampler.probs(target[i, : num_draft[i] + 1], seq.request.params)
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
