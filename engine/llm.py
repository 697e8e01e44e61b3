"""Offline API for scripts and benchmarks: `LLM(model=DIR).generate(prompts, SamplingParams(...))`."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import cast

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams


class LLM:
    def __init__(self, model: str, **config):
        """Keyword arguments are EngineConfig fields (dtype, load_format, max_num_seqs, num_kv_blocks, ...)."""
        self.engine = LLMEngine(EngineConfig(model=model, **config))
        self.tokenizer = self.engine.tokenizer
        self._ids = itertools.count()

    def generate(
        self,
        prompts: str | Sequence[int] | Sequence[str] | Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Run every prompt to completion; outputs in the order of the prompts.
        Prompts are strings (tokenized as they are, no chat template) or lists of token ids."""
        batch: Sequence[str | Sequence[int]]
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            batch = [cast("str | Sequence[int]", prompts)]  # one prompt: text, or token ids
        else:
            batch = cast("Sequence[str | Sequence[int]]", prompts)
        params = params or SamplingParams()
        per_prompt = params if isinstance(params, Sequence) else [params] * len(batch)
        order = []
        for prompt, p in zip(batch, per_prompt):
            token_ids = self.tokenizer.encode(prompt, add_special_tokens=False) if isinstance(prompt, str) else prompt
            request_id = str(next(self._ids))
            if p.structured is not None:
                self.engine.grammars.compile(p.structured)  # raises GrammarError here, as the server answers 400
            self.engine.add_request(request_id, list(token_ids), p)
            order.append(request_id)
        finished: dict[str, RequestOutput] = {}
        while self.engine.has_unfinished_requests():
            for out in self.engine.step():
                if out.finished:
                    finished[out.request_id] = out
        return [finished[r] for r in order]

    def chat(self, messages: list[dict], params: SamplingParams | None = None) -> RequestOutput:
        token_ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return self.generate([self.tokenizer.encode(token_ids, add_special_tokens=False)], params)[0]
