"""Exact prompt token counts with each model's own tokenizer and chat template, without transformers.

Loaded once per model at start-up from the folder's files as `AutoTokenizer.from_pretrained` reads them for a
tokenizers-backed tokenizer: the Rust `tokenizer.json`, the special tokens, `split_special_tokens` and
`model_max_length` from `tokenizer_config.json` (special tokens the file names that tokenizer.json lacks are added,
as transformers adds them), and the chat template(s) found by gateway/request/chat_template.py, which also renders
them in an environment equivalent to transformers'. tests/gateway/test_tokenizer.py checks the ids against
`AutoTokenizer.apply_chat_template(..., tokenize=True)` and the tokenizer call. Neither torch nor transformers is
imported (tests/gateway/test_torch_free.py, tests/test_import_contracts.py). Tokenizer classes whose transformers
implementation rebuilds the Rust tokenizer from its vocabulary (their own normalizer or pre-tokenizer), and the
Mistral pre-tokenizer regex patch transformers applies to some >100k vocabularies, are not reproduced: such a folder
counts with its tokenizer.json as written.

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.errors import invalid_request
from gateway.request.chat_template import compile_chat_template, load_chat_templates, select_template

if TYPE_CHECKING:
    import jinja2
    from tokenizers import Tokenizer

LONG_PROMPT_CHARS = 32_768
CACHED_PIECES = 8192
MAX_CACHED_PIECE_CHARS = 16_384
# The named special tokens transformers passes to every chat template (SPECIAL_TOKENS_ATTRIBUTES).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class PromptTokenizer:
    def __init__(self, path: str):
        from tokenizers import Tokenizer

        folder = Path(path)
        if not (folder / "tokenizer.json").is_file():
            raise ValueError(f"{path!r} has no tokenizer.json; the gateway needs a fast (Rust) tokenizer folder")
        config = _tokenizer_config(folder)
        self._rust = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._rust.no_truncation()  # transformers' call sets both per call: off unless asked for
        self._rust.no_padding()
        self._rust.encode_special_tokens = bool(config.get("split_special_tokens", False))
        special = _special_tokens(config)
        _add_missing_special_tokens(self._rust, config, special)
        self._templates = load_chat_templates(folder, config)
        self.has_chat_template = bool(self._templates)
        self._compiled: dict[str, jinja2.Template] = {}
        self._template_vars = {name: _content(special[name]) for name in SPECIAL_TOKEN_NAMES if name in special}
        self._splitter, self._added_ids = _added_token_splitter(self._rust)
        self._piece_ids = functools.lru_cache(maxsize=CACHED_PIECES)(self._encode_piece)
        max_len = config.get("model_max_length")
        self.model_max_length: int | None = (
            max_len if isinstance(max_len, int) and not isinstance(max_len, bool) and 0 < max_len < 10**9 else None
        )
        # No token stands for more characters than its own text (byte-level tokens: bytes, at least as many)
        self._max_chars_per_token = max(len(token) for token in self._rust.get_vocab(with_added_tokens=True))

    def _template(self, tools: list[Any] | None) -> jinja2.Template:
        assert self._templates
        source = select_template(self._templates, tools)
        compiled = self._compiled.get(source)
        if compiled is None:
            compiled = self._compiled[source] = compile_chat_template(source)
        return compiled

    def render_chat(self, messages: list[dict[str, Any]], tools: list[Any] | None = None) -> str:
        if not self.has_chat_template:
            raise invalid_request("This model has no chat template; use /v1/completions.", param="messages")
        messages = [_plain_message(m) for m in messages]
        try:
            return self._template(tools).render(
                messages=messages, add_generation_prompt=True, tools=tools, documents=None, **self._template_vars
            )
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


def _tokenizer_config(folder: Path) -> dict[str, Any]:
    """tokenizer_config.json, with a legacy special_tokens_map.json's entries where the config names none."""
    config: dict[str, Any] = {}
    if (folder / "tokenizer_config.json").is_file():
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    if (folder / "special_tokens_map.json").is_file():
        legacy = json.loads((folder / "special_tokens_map.json").read_text(encoding="utf-8"))
        for key, value in legacy.items():
            config.setdefault(key, value)
    return config


def _special_tokens(config: dict[str, Any]) -> dict[str, str | dict[str, Any]]:
    """The named special tokens (bos_token, ...): a string, or a serialized AddedToken (a dict with "content")."""
    return {name: value for name in SPECIAL_TOKEN_NAMES if isinstance(value := config.get(name), str | dict)}


def _content(token: str | dict[str, Any]) -> str:
    return token if isinstance(token, str) else str(token["content"])


def _add_missing_special_tokens(
    rust: Tokenizer, config: dict[str, Any], special: dict[str, str | dict[str, Any]]
) -> None:
    """Tokens the config names that tokenizer.json's added tokens lack, added as transformers adds them on load
    (special, not normalized, unless an AddedToken's own fields say otherwise)."""
    from tokenizers import AddedToken

    wanted: list[str | dict[str, Any]] = list(special.values())
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        wanted += [t for _, t in sorted(decoder.items(), key=lambda item: int(item[0])) if isinstance(t, dict)]
    for key in ("extra_special_tokens", "additional_special_tokens"):
        extra = config.get(key)
        if isinstance(extra, list):
            wanted += [t for t in extra if isinstance(t, str | dict)]
    present = {t.content for t in rust.get_added_tokens_decoder().values()}
    for token in wanted:
        content = _content(token)
        if content in present:
            continue
        present.add(content)
        if isinstance(token, str):
            rust.add_special_tokens([AddedToken(content, special=True, normalized=False)])
            continue
        fields = {k: bool(v) for k, v in token.items() if k in ("single_word", "lstrip", "rstrip", "normalized")}
        if token.get("special", True):
            rust.add_special_tokens([AddedToken(content, special=True, **{"normalized": False, **fields})])
        else:
            rust.add_tokens([AddedToken(content, **fields)])


_TEXT_PARTS = ("text", "refusal")  # the parts whose text the model reads; a part's text is under its type's name


def _plain_message(message: dict[str, Any]) -> dict[str, Any]:
    """OpenAI content parts ([{"type": "text", "text": ...}]) joined into the plain string most templates expect,
    and an assistant turn's tool-call arguments (JSON text) decoded into the object templates write with `tojson`,
    as the engine renders them (engine/server/protocol.py, `_template_message`)."""
    content = message.get("content")
    if isinstance(content, list):
        texts = [p.get(p.get("type"), "") for p in content if isinstance(p, dict) and p.get("type") in _TEXT_PARTS]
        message = {**message, "content": "".join(t for t in texts if isinstance(t, str))}
    elif content is None:  # an assistant turn that called tools, or refused: what the model said is its refusal
        refusal = message.get("refusal")
        message = {**message, "content": refusal if isinstance(refusal, str) else ""}
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        message = {**message, "tool_calls": [_decoded_arguments(call) for call in calls]}
    return message


def _decoded_arguments(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(arguments := function.get("arguments"), str):
        return call
    try:
        value = json.loads(arguments)
    except ValueError:
        return call
    return {**call, "function": {**function, "arguments": value}} if isinstance(value, dict) else call


def estimate_tokens(text: str) -> int:
    """For models configured without a tokenizer: ~4 bytes a token, rounded up (settlement corrects it)."""
    return -(-len(text.encode()) // 4)
