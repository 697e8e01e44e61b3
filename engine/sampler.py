"""Batched sampling: one set of tensor ops for the whole step (no per-token Python).

Randomness uses the exponential race: token = argmax(p_i / E_i) with E_i ~ Exp(1) is an exact sample from p.
Each seeded sequence draws its E from its own generator, so its tokens do not depend on what else is in the
batch; unseeded rows share the engine's generator in one draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from engine.outputs import TokenLogprob
from engine.sampling_params import SamplingParams

_GREEDY_EPS = 1e-5


@dataclass
class SamplingRow:
    params: SamplingParams
    generator: torch.Generator | None
    output_token_ids: list[int]  # for penalties: the sequence's own list (Sequence.output_ids), see _OutputCounts
    suppressed_token_ids: list[int]  # EOS / stop tokens while under min_tokens
    # Greedy, no penalties, no logprobs: the row's token is its logits' argmax (once nothing is suppressed).
    plain_greedy: bool = field(init=False)
    # logit_bias as tensors, made once per sequence (the row lives as long as it): token ids and their biases.
    bias_tokens: torch.Tensor | None = field(init=False, default=None)
    bias_values: torch.Tensor | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        p = self.params
        self.plain_greedy = p.temperature < _GREEDY_EPS and not p.adjusts_logits and p.logprobs is None
        if p.logit_bias:
            self.bias_tokens = torch.tensor(list(p.logit_bias.keys()), dtype=torch.long)
            self.bias_values = torch.tensor(list(p.logit_bias.values()), dtype=torch.float32)


@dataclass
class SampleResult:
    token_ids: list[int]
    logprobs: list[TokenLogprob | None]


@dataclass
class PendingSample:
    """A step's tokens, sampled and maybe still on their way from the device (Sampler.launch)."""

    ready: SampleResult | None
    host: torch.Tensor | None = None  # [R] int64, pinned, the target of a non-blocking copy
    copied: torch.cuda.Event | None = None  # recorded after that copy

    def result(self) -> SampleResult:
        if self.ready is None:
            assert self.host is not None and self.copied is not None  # launch sets both when it leaves ready unset
            self.copied.synchronize()
            self.ready = SampleResult(self.host.tolist(), [None] * self.host.shape[0])
        return self.ready


class Sampler:
    def __init__(self, device: torch.device, seed: int):
        self.device = device
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.on_cpu = device.type == "cpu"
        self._output_counts = _OutputCounts()
        self._host: torch.Tensor | None = None  # launch's pinned buffer

    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow]) -> SampleResult:
        """logits: [R, V] fp32, one row per SamplingRow."""
        if self.on_cpu and logits.dtype == torch.float32 and _plain_greedy(rows):
            # numpy's argmax over rows is vectorised, torch's on a CPU is not: ~10x at 64 x 4096 (same index on ties:
            # the first)
            self._output_counts.forget()
            return SampleResult(logits.numpy().argmax(axis=-1).tolist(), [None] * len(rows))
        token_ids, logprobs = self._sample(logits, rows)
        token_list = token_ids.tolist()
        return SampleResult(token_list, self._gather_logprobs(logprobs, token_list, [r.params.logprobs for r in rows]))

    def launch(self, logits: torch.Tensor, rows: list[SamplingRow]) -> PendingSample:
        """As __call__, without waiting for the device: the tokens come back through a non-blocking copy, read when
        the engine asks for them (LLMEngine with async_output_processing). A step with logprobs, or on a CPU, is
        sampled at once."""
        if self.on_cpu or any(r.params.logprobs is not None for r in rows):
            return PendingSample(self(logits, rows))
        token_ids, _ = self._sample(logits, rows)
        if self._host is None or self._host.shape[0] < token_ids.shape[0]:
            # Pinned, so the copy is asynchronous; one buffer serves every step, as a step's tokens are read before
            # the next step is sampled.
            self._host = torch.empty(max(token_ids.shape[0], 256), dtype=torch.int64, pin_memory=True)
        host = self._host[: token_ids.shape[0]]
        host.copy_(token_ids, non_blocking=True)
        copied = torch.cuda.Event()
        copied.record(torch.cuda.current_stream(token_ids.device))
        return PendingSample(None, host, copied)

    def _sample(self, logits: torch.Tensor, rows: list[SamplingRow]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Token ids [R] on the device, and the log-probabilities [R, V] when a row asks for them."""
        if _plain_greedy(rows):
            # The common case of a greedy batch: one op, none of the per-row checks below.
            self._output_counts.forget()
            return logits.argmax(dim=-1), None
        num_rows, vocab = logits.shape
        params = [r.params for r in rows]
        self._suppress(logits, rows)
        if any(p.has_penalties for p in params):
            self._apply_penalties(logits, rows, vocab)
        else:
            self._output_counts.forget()  # no penalized sequence is in this step
        if any(r.bias_tokens is not None for r in rows):
            self._apply_logit_bias(logits, rows)
        logprobs = torch.log_softmax(logits, dim=-1) if any(p.logprobs is not None for p in params) else None

        token_ids = logits.argmax(dim=-1)
        sampled_rows = [i for i, p in enumerate(params) if p.temperature >= _GREEDY_EPS]
        if len(sampled_rows) == num_rows:
            token_ids = self._sample_random(logits, rows)
        elif sampled_rows:  # greedy rows keep their argmax and skip the sort and the random draw
            index = _on_device(sampled_rows, logits.device)
            token_ids[index] = self._sample_random(logits[index], [rows[i] for i in sampled_rows])
        return token_ids, logprobs

    @staticmethod
    def _suppress(logits: torch.Tensor, rows: list[SamplingRow]) -> None:
        suppressed = [(i, token) for i, row in enumerate(rows) for token in row.suppressed_token_ids]
        if suppressed:
            row_ids, token_ids = zip(*suppressed)
            index = (_on_device(list(row_ids), logits.device), _on_device(list(token_ids), logits.device))
            logits.index_put_(
                index, torch.full((len(suppressed),), -math.inf, dtype=logits.dtype, device=logits.device)
            )

    def _apply_penalties(self, logits: torch.Tensor, rows: list[SamplingRow], vocab: int) -> None:
        # OpenAI semantics: logit -= frequency_penalty * count + presence_penalty * (count > 0), over output tokens.
        counts = self._output_counts.update([r.output_token_ids for r in rows], vocab, logits.device)
        freq = _on_device([r.params.frequency_penalty for r in rows], logits.device)[:, None]
        pres = _on_device([r.params.presence_penalty for r in rows], logits.device)[:, None]
        logits -= freq * counts + pres * (counts > 0).float()

    @staticmethod
    def _apply_logit_bias(logits: torch.Tensor, rows: list[SamplingRow]) -> None:
        """One scatter-add for every biased row of the step (a bias on a masked-out token leaves it at -inf)."""
        biased = [
            (i, r.bias_tokens, r.bias_values)
            for i, r in enumerate(rows)
            if r.bias_tokens is not None and r.bias_values is not None
        ]
        row_ids = _on_device(torch.cat([torch.full_like(tokens, i) for i, tokens, _ in biased]), logits.device)
        tokens = _on_device(torch.cat([tokens for _, tokens, _ in biased]), logits.device)
        values = _on_device(torch.cat([values for _, _, values in biased]).to(logits.dtype), logits.device)
        logits.index_put_((row_ids, tokens), values, accumulate=True)

    def _sample_random(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        """One token per row, none of them greedy."""
        temps = _on_device([r.params.temperature for r in rows], logits.device)
        scaled = logits / temps[:, None]
        scaled = self._truncate(scaled, [r.params for r in rows])
        probs = torch.softmax(scaled, dim=-1)
        race = torch.empty_like(probs)
        unseeded = [i for i, row in enumerate(rows) if row.generator is None]
        if len(unseeded) == len(rows):
            race.exponential_(generator=self.generator)
        else:
            # A seeded row draws only from its own generator; the engine's draws only for the others.
            if unseeded:
                race[_on_device(unseeded, race.device)] = torch.empty(
                    len(unseeded), race.shape[1], device=race.device
                ).exponential_(generator=self.generator)
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
        k = _on_device([k if 0 < k < vocab else vocab for k in top_k], device)[:, None]  # any int fits
        drop = rank >= k
        sorted_probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
        cumulative = sorted_probs.cumsum(dim=-1)
        # Keeps the first token. Rows without top-p keep every token: their cumulative sum can round past 1.0
        # before the tail, so the threshold 1.0 would cut some.
        top_p_threshold = _on_device([p if p < 1.0 else math.inf for p in top_p], device)[:, None]
        drop |= (cumulative - sorted_probs) > top_p_threshold
        drop |= sorted_probs < _on_device(min_p, device)[:, None] * sorted_probs[:, :1]
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        return torch.empty_like(scaled).scatter_(1, order, sorted_logits)

    @staticmethod
    def _gather_logprobs(
        logprobs: torch.Tensor | None, token_ids: list[int], want: list[int | None]
    ) -> list[TokenLogprob | None]:
        if logprobs is None:
            return [None] * len(token_ids)
        rows = [i for i, k in enumerate(want) if k is not None]
        row_index = torch.tensor(rows, device=logprobs.device)
        chosen_ids = torch.tensor([token_ids[i] for i in rows], device=logprobs.device)
        # One host transfer per tensor (each is a device sync), then plain list slicing per row.
        chosen = logprobs[row_index, chosen_ids].tolist()
        top_value_tensor, top_id_tensor = logprobs[row_index].topk(max(k for k in want if k is not None), dim=-1)
        top_values, top_ids = top_value_tensor.tolist(), top_id_tensor.tolist()
        out: list[TokenLogprob | None] = [None] * len(token_ids)
        for j, i in enumerate(rows):
            k = want[i]
            out[i] = TokenLogprob(token_ids[i], chosen[j], list(zip(top_ids[j][:k], top_values[j][:k])))
        return out


def _on_device(values: list | torch.Tensor, device: torch.device) -> torch.Tensor:
    """Host values (a list, or a CPU tensor) on the device without waiting for it: on CUDA through pinned memory
    and an asynchronous copy, as a copy from pageable memory first waits for every kernel queued before it, which
    would let no step overlap the next (async_output_processing)."""
    host = values if isinstance(values, torch.Tensor) else torch.tensor(values)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def _plain_greedy(rows: list[SamplingRow]) -> bool:
    return all(r.plain_greedy and not r.suppressed_token_ids for r in rows)


class _OutputCounts:
    """Output-token counts per sampling row, carried from step to step: a step counts only the tokens each sequence
    added since the last (one, or a few after speculation), not its whole output again.

    A sequence is known by its output list, which the engine passes as is (Sequence.output_ids: one list per
    sequence, only ever appended to; each fork has its own). The list is kept while followed, so its id() cannot
    pass to another list. A sequence missing from a step (finished, preempted, left out of the batch) is forgotten,
    which bounds the memory to one batch; if it comes back it is counted from its list again, once."""

    def __init__(self):
        self._counts: torch.Tensor | None = None  # [rows of the last step, V] on the device
        self._rows: dict[int, tuple[list[int], int, int]] = {}  # id(list) -> (list, row in _counts, tokens counted)

    def update(self, outputs: list[list[int]], vocab: int, device: torch.device) -> torch.Tensor:
        """Counts [len(outputs), vocab] of this step's rows, in their order."""
        kept_rows, old_rows, token_rows, token_ids = [], [], [], []
        rows = {}
        for i, tokens in enumerate(outputs):
            known = self._rows.get(id(tokens))
            num_counted = 0
            if known is not None and known[2] <= len(tokens):  # a list that shrank is not a sequence's: recount
                kept_rows.append(i)
                old_rows.append(known[1])
                num_counted = known[2]
            new_tokens = tokens[num_counted:]
            token_rows += [i] * len(new_tokens)
            token_ids += new_tokens
            rows[id(tokens)] = (tokens, i, len(tokens))
        counts = torch.zeros(len(outputs), vocab, device=device)
        if kept_rows:
            assert self._counts is not None  # kept rows were counted in an earlier step
            counts[_on_device(kept_rows, device)] = self._counts[_on_device(old_rows, device)]
        if token_ids:
            index = (_on_device(token_rows, device), _on_device(token_ids, device))
            counts.index_put_(index, torch.ones(len(token_ids), device=device), accumulate=True)
        self._counts, self._rows = counts, rows
        return counts

    def forget(self) -> None:
        self._counts, self._rows = None, {}
