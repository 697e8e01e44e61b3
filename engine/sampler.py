"""Batched sampling: one set of tensor ops for the whole step (no per-token Python).

Randomness uses the exponential race: token = argmax(p_i / E_i) with E_i ~ Exp(1) is an exact sample from p.
Each seeded sequence draws its E from its own generator, so its tokens do not depend on what else is in the
batch; unseeded rows share the engine's generator in one draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.outputs import TokenLogprob
from engine.sampling_params import SamplingParams

_GREEDY_EPS = 1e-5


@dataclass
class SamplingRow:
    params: SamplingParams
    generator: torch.Generator | None
    output_token_ids: list[int]  # for penalties
    suppressed_token_ids: list[int]  # EOS / stop tokens while under min_tokens


@dataclass
class SampleResult:
    token_ids: list[int]
    logprobs: list[TokenLogprob | None]


class Sampler:
    def __init__(self, device: torch.device, seed: int):
        self.device = device
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow]) -> SampleResult:
        """logits: [R, V] fp32, one row per SamplingRow."""
        num_rows, vocab = logits.shape
        params = [r.params for r in rows]
        self._suppress(logits, rows)
        if any(p.has_penalties for p in params):
            self._apply_penalties(logits, rows, vocab)
        want_logprobs = [p.logprobs for p in params]
        logprobs = torch.log_softmax(logits, dim=-1) if any(k is not None for k in want_logprobs) else None

        temperatures = [p.temperature for p in params]
        greedy = [t < _GREEDY_EPS for t in temperatures]
        token_ids = logits.argmax(dim=-1)
        if not all(greedy):
            sampled = self._sample_random(logits, rows, temperatures, greedy)
            token_ids = torch.where(torch.tensor(greedy, device=logits.device), token_ids, sampled)
        token_list = token_ids.tolist()
        return SampleResult(token_list, self._gather_logprobs(logprobs, token_list, want_logprobs))

    @staticmethod
    def _suppress(logits: torch.Tensor, rows: list[SamplingRow]) -> None:
        for i, row in enumerate(rows):
            if row.suppressed_token_ids:
                logits[i, row.suppressed_token_ids] = float("-inf")

    def _apply_penalties(self, logits: torch.Tensor, rows: list[SamplingRow], vocab: int) -> None:
        # OpenAI semantics: logit -= frequency_penalty * count + presence_penalty * (count > 0), over output tokens.
        max_len = max(len(r.output_token_ids) for r in rows)
        if max_len == 0:
            return
        padded = torch.full((len(rows), max_len), vocab, dtype=torch.long)  # index `vocab` is a discard column
        for i, r in enumerate(rows):
            padded[i, : len(r.output_token_ids)] = torch.tensor(r.output_token_ids, dtype=torch.long)
        counts = torch.zeros(len(rows), vocab + 1, device=logits.device)
        counts.scatter_add_(1, padded.to(logits.device), torch.ones_like(padded, dtype=counts.dtype, device=logits.device))
        counts = counts[:, :vocab]
        freq = torch.tensor([r.params.frequency_penalty for r in rows], device=logits.device)[:, None]
        pres = torch.tensor([r.params.presence_penalty for r in rows], device=logits.device)[:, None]
        logits -= freq * counts + pres * (counts > 0).float()

    def _sample_random(
        self, logits: torch.Tensor, rows: list[SamplingRow], temperatures: list[float], greedy: list[bool]
    ) -> torch.Tensor:
        temps = torch.tensor([1.0 if g else t for t, g in zip(temperatures, greedy)], device=logits.device)
        scaled = logits / temps[:, None]
        scaled = self._truncate(scaled, [r.params for r in rows])
        probs = torch.softmax(scaled, dim=-1)
        race = torch.empty_like(probs)
        race.exponential_(generator=self.generator)
        for i, row in enumerate(rows):
            if row.generator is not None:
                race[i].exponential_(generator=row.generator)
        return (probs / race).argmax(dim=-1)

    def probs(self, logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
        """[N, V] logits of one request -> the distribution it samples from (temperature, top-k/p, min-p)."""
        scaled = logits / max(params.temperature, _GREEDY_EPS)
        return torch.softmax(self._truncate(scaled, [params] * logits.shape[0]), dim=-1)

    @staticmethod
    def _truncate(scaled: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
        """top-k, top-p and min-p as masks over one descending sort, only when some row asks for them."""
        top_k = [p.top_k for p in params]
        top_p = [p.top_p for p in params]
        min_p = [p.min_p for p in params]
        if not any(top_k) and all(p >= 1.0 for p in top_p) and not any(min_p):
            return scaled
        vocab = scaled.shape[-1]
        device = scaled.device
        sorted_logits, order = scaled.sort(dim=-1, descending=True)
        rank = torch.arange(vocab, device=device)[None, :]
        k = torch.tensor([k if 0 < k < vocab else vocab for k in top_k], device=device)[:, None]  # any int fits
        drop = rank >= k
        sorted_probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
        cumulative = sorted_probs.cumsum(dim=-1)
        drop |= (cumulative - sorted_probs) > torch.tensor(top_p, device=device)[:, None]  # keeps the first token
        drop |= sorted_probs < torch.tensor(min_p, device=device)[:, None] * sorted_probs[:, :1]
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        return torch.empty_like(scaled).scatter_(1, order, sorted_logits)

    @staticmethod
    def _gather_logprobs(
        logprobs: torch.Tensor | None, token_ids: list[int], want: list[int | None]
    ) -> list[TokenLogprob | None]:
        if logprobs is None:
            return [None] * len(token_ids)
        max_k = max(k for k in want if k is not None)
        rows = torch.tensor([i for i, k in enumerate(want) if k is not None])
        chosen = logprobs[rows, torch.tensor([token_ids[i] for i in rows.tolist()])].tolist()
        top_values, top_ids = (logprobs[rows].topk(max_k, dim=-1) if max_k else (None, None))
        out: list[TokenLogprob | None] = [None] * len(token_ids)
        for j, i in enumerate(rows.tolist()):
            k = want[i]
            top = list(zip(top_ids[j, :k].tolist(), top_values[j, :k].tolist())) if k else []
            out[i] = TokenLogprob(token_ids[i], chosen[j], top)
        return out
