"""Step 4 of the request path: the exact prompt token count (and the token ids routing hashes)."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import ModelConfig
from gateway.errors import context_length_exceeded
from gateway.request.parse import CHAT, EMBEDDINGS, ParsedRequest
from gateway.request.tokenizer import PromptTokenizer, estimate_tokens


@dataclass
class Prompt:
    prompt_tokens: int
    """All prompts together: what the input bucket is charged."""
    token_ids: list[int] | None
    """The first prompt's ids (routing and block hashes); None without a tokenizer."""
    text: str
    longest_prompt_tokens: int
    """The longest single prompt (what each completion's context holds)."""


async def measure(parsed: ParsedRequest, model: ModelConfig, tokenizer: PromptTokenizer | None) -> Prompt:
    ids: list[int] | None
    if parsed.kind == CHAT:
        if tokenizer is None:
            text = "".join(str(m.get("content") or "") for m in parsed.body["messages"])
            count = estimate_tokens(text)
            prompt = Prompt(count, None, text, count)
        else:
            text = tokenizer.render_chat(parsed.body["messages"], parsed.body.get("tools"))
            _check_context(tokenizer.min_tokens(text), parsed, model, tokenizer, "messages", at_least=True)
            ids = await tokenizer.encode(text, add_special_tokens=False)
            prompt = Prompt(len(ids), ids, text, len(ids))
        _check_context(prompt.prompt_tokens, parsed, model, tokenizer, "messages")
        return prompt
    total, longest, first_ids, first_text = 0, 0, None, ""
    param = "input" if parsed.kind == EMBEDDINGS else "prompt"
    for i, item in enumerate(parsed.prompts):
        if isinstance(item, str):
            if tokenizer:
                _check_context(tokenizer.min_tokens(item), parsed, model, tokenizer, param, at_least=True)
            ids = await tokenizer.encode(item, add_special_tokens=True) if tokenizer else None
            count = len(ids) if ids is not None else estimate_tokens(item)
        else:
            ids, count = item, len(item)
        _check_context(count, parsed, model, tokenizer, param)
        if i == 0:
            first_ids, first_text = ids, item if isinstance(item, str) else ""
        total += count
        longest = max(longest, count)
    return Prompt(total, first_ids, first_text, longest)


def max_context(model: ModelConfig, tokenizer: PromptTokenizer | None) -> int | None:
    return model.max_model_len or (tokenizer.model_max_length if tokenizer else None)


def _check_context(
    prompt_tokens: int,
    parsed: ParsedRequest,
    model: ModelConfig,
    tokenizer: PromptTokenizer | None,
    param: str,
    at_least: bool = False,
) -> None:
    """`at_least`: prompt_tokens is the length-only lower bound, checked before encoding a prompt that may not be
    worth encoding: only a prompt that cannot fit alone is refused on it, so any other refusal gives the exact count.
    A completion needs one token at least: a prompt that fills the window leaves no room for an answer (an
    embedding needs none)."""
    max_len = max_context(model, tokenizer)
    if max_len is None or (at_least and prompt_tokens < max_len):
        return
    # An embedding has no completion, whatever max_tokens it carries.
    completion_tokens = 0 if parsed.kind == EMBEDDINGS else (parsed.max_tokens or 1)
    if prompt_tokens + completion_tokens > max_len:
        raise context_length_exceeded(prompt_tokens, completion_tokens, max_len, param, at_least)
