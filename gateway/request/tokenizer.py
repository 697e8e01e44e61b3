"""Exact prompt token counts with each model's own tokenizer and chat template.

Loaded once per model at start-up through transformers' tokenizers backend (which, unlike AutoTokenizer, does not
import torch: the gateway stays torch-free at run time too). The hot path renders the chat template compiled
once in a Jinja environment set up as transformers sets up its own (~20 us, vs ~50 us through
apply_chat_template's per-call conversions) and encodes with the Rust tokenizer directly (~100 us for a short
chat), skipping BatchEncoding. Requests with tools, and templates this environment cannot compile, take
apply_chat_template itself. tests/gateway/test_tokenizer.py checks the ids against AutoTokenizer's.

Chat prompts are encoded piecewise: the tokenizer itself cuts text at its added (special) tokens before anything
else, so the ids of a rendered chat are the ids of the pieces between them, and pieces repeat (system prompts,
role headers, every earlier turn of a conversation that is resent each turn). Pieces are cached (LRU), so a
conversation's turn costs the encoding of its newest message only. Tokenizers whose added tokens strip spaces or
are normalized would break that identity; they take the whole-text path.

Prompts longer than LONG_PROMPT_CHARS are encoded in a worker thread through `encode_batch`, which releases the GIL
while it works (`encode` holds it: a 30 MiB prompt stalled every other request for 40 s), and a prompt whose length
in characters alone proves it cannot fit the context is refused without encoding it (`min_tokens`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from gateway.errors import invalid_request

if TYPE_CHECKING:
    import jinja2
    from tokenizers import Tokenizer

LONG_PROMPT_CHARS = 32_768
CACHED_PIECES = 8192
MAX_CACHED_PIECE_CHARS = 16_384


class PromptTokenizer:
    def __init__(self, path: str):
        from transformers.tokenization_utils_tokenizers import PreTrainedTokenizerFast

        if not (Path(path) / "tokenizer.json").is_file():
            raise ValueError(f"{path!r} has no tokenizer.json; the gateway needs a fast (Rust) tokenizer folder")
        self._hf = PreTrainedTokenizerFast.from_pretrained(path)
        self._rust = self._hf.backend_tokenizer
        self.has_chat_template = bool(self._hf.chat_template)
        self._template = _compile(self._hf.chat_template) if self.has_chat_template else None
        self._template_vars = {k: v for k, v in self._hf.special_tokens_map.items() if isinstance(v, str)}
        self._splitter, self._added_ids = _added_token_splitter(self._rust)
        self._piece_ids = functools.lru_cache(maxsize=CACHED_PIECES)(self._encode_piece)
        max_len = self._hf.model_max_length
        self.model_max_length: int | None = max_len if isinstance(max_len, int) and max_len < 10**9 else None
        # No token stands for more characters than its own text (byte-level tokens: bytes, at least as many)
        self._max_chars_per_token = max(len(token) for token in self._rust.get_vocab(with_added_tokens=True))

    def render_chat(self, messages: list[dict[str, Any]], tools: list[Any] | None = None) -> str:
        if not self.has_chat_template:
            raise invalid_request("This model has no chat template; use /v1/completions.", param="messages")
        messages = [_plain_message(m) for m in messages]
        try:
            if self._template is not None and tools is None:
                return self._template.render(
                    messages=messages, add_generation_prompt=True, tools=None, documents=None, **self._template_vars
                )
            rendered: str = self._hf.apply_chat_template(
                messages, tools=tools, tokenize=False, add_generation_prompt=True
            )
            return rendered
        except Exception as exc:  # a template rejects a conversation with TemplateError, TypeError, ValueError...
            raise invalid_request(
                f"messages could not be rendered with the model's chat template: {exc}", param="messages"
            ) from None

    def min_tokens(self, text: str) -> int:
        """A lower bound on the text's token count, from its length alone (halved: a normalizer may drop
        characters, e.g. accents)."""
        return len(text) // (2 * self._max_chars_per_token)

    async def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        if len(text) > LONG_PROMPT_CHARS:
            return await asyncio.to_thread(self.encode_now, text, add_special_tokens)
        return self.encode_now(text, add_special_tokens)

    def encode_now(self, text: str, add_special_tokens: bool) -> list[int]:
        if add_special_tokens or self._splitter is None:
            return self._rust_ids(text, add_special_tokens)
        ids: list[int] = []
        for i, piece in enumerate(self._splitter.split(text)):
            if i % 2:  # the capture group: an added token
                ids.append(self._added_ids[piece])
            elif len(piece) > MAX_CACHED_PIECE_CHARS:
                ids.extend(self._encode_piece(piece))
            elif piece:
                ids.extend(self._piece_ids(piece))
        return ids

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        return tuple(self._rust_ids(piece, False))

    def _rust_ids(self, text: str, add_special_tokens: bool) -> list[int]:
        ids: list[int]
        if len(text) > LONG_PROMPT_CHARS:  # we are in a worker thread: let the event loop run meanwhile
            ids = self._rust.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids
        else:
            ids = self._rust.encode(text, add_special_tokens=add_special_tokens).ids
        return ids

    def count(self, text: str) -> int:
        return len(self._rust_ids(text, False))


def _added_token_splitter(rust: Tokenizer) -> tuple[re.Pattern[str] | None, dict[str, int]]:
    added = rust.get_added_tokens_decoder()
    if not added or any(t.lstrip or t.rstrip or t.single_word or t.normalized for t in added.values()):
        return None, {}
    by_content = {t.content: token_id for token_id, t in added.items()}
    # longest first: the tokenizer matches added tokens leftmost-longest
    alternatives = "|".join(re.escape(c) for c in sorted(by_content, key=len, reverse=True))
    return re.compile(f"({alternatives})"), by_content


def _compile(template: str) -> jinja2.Template | None:
    """The template in an environment like transformers' (sandboxed, trim/lstrip blocks, its tojson, its globals);
    None when it needs transformers' own extensions (e.g. {% generation %})."""
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> NoReturn:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: object,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except jinja2.exceptions.TemplateSyntaxError:
        return None


def _plain_message(message: dict[str, Any]) -> dict[str, Any]:
    """OpenAI content parts ([{"type": "text", "text": ...}]) joined into the plain string most templates expect."""
    content = message.get("content")
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return {**message, "content": "".join(t for t in texts if isinstance(t, str))}
    if content is None:
        return {**message, "content": ""}
    return message


def estimate_tokens(text: str) -> int:
    """For models configured without a tokenizer: ~4 bytes a token, rounded up (settlement corrects it)."""
    return -(-len(text.encode()) // 4)
