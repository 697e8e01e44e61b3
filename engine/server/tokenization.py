"""The server's own tokenizer: prompt and chat-template encoding off the event loop, and token text for logprobs.

It is a second instance, not the engine's: the engine thread detokenizes with its own, and a fast tokenizer used
from two threads at once can fail ("Already borrowed"). All encoding runs on one worker thread, so a 1 MB prompt
delays other prompts' tokenization but never the event loop.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

from tokenizers import decoders

from engine.server.errors import InvalidRequestError


class Tokenization:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize")
        self._byte_level = isinstance(getattr(tokenizer.backend_tokenizer, "decoder", None), decoders.ByteLevel)
        self._byte_decoder = {c: b for b, c in _bytes_to_unicode().items()}
        self.special_ids = frozenset(i for i, token in tokenizer.added_tokens_decoder.items() if token.special)
        """What skip_special_tokens leaves out of a completion's text."""

    @classmethod
    def from_pretrained(cls, model_dir: str) -> Tokenization:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(model_dir))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return await self._run(self._encode, text, add_special_tokens)

    async def encode_chat(
        self, messages: list[dict], add_generation_prompt: bool = True, tools: list[dict] | None = None
    ) -> list[int]:
        """`tools`: function definitions the template renders (Hugging Face's `tools=`), as the client sent them."""
        return await self._run(self._encode_chat, messages, add_generation_prompt, tools)

    async def decode(self, token_ids: list[int]) -> str:
        return await self._run(self.tokenizer.decode, token_ids)

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes a token stands for (a byte-level token may hold part of a UTF-8 character)."""
        return self._token_bytes_cached(token_id)

    def token_text(self, token_id: int) -> str:
        return self.token_bytes(token_id).decode("utf-8", errors="replace")

    # -- internals --------------------------------------------------------------------------------------------------

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _encode(self, text: str, add_special_tokens: bool) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)

    def _encode_chat(self, messages: list[dict], add_generation_prompt: bool, tools: list[dict] | None) -> list[int]:
        try:
            text = self.tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False
            )
        except Exception as exc:  # noqa: BLE001 - a template rejects a conversation with TemplateError, ValueError...
            # (a system role the template forbids, turns that do not alternate, no chat template at all)
            raise InvalidRequestError(
                f"messages could not be rendered with the model's chat template: {exc}", param="messages"
            ) from None
        # The template writes the special tokens (BOS, headers) itself.
        return self.tokenizer.encode(text, add_special_tokens=False)

    @lru_cache(maxsize=1 << 17)  # noqa: B019 - one instance per server; the cache is the vocabulary at most
    def _token_bytes_cached(self, token_id: int) -> bytes:
        piece = self.tokenizer.convert_ids_to_tokens(token_id)
        if piece is None:
            return b""
        if self._byte_level and all(c in self._byte_decoder for c in piece):
            return bytes(self._byte_decoder[c] for c in piece)
        return self.tokenizer.decode([token_id]).encode("utf-8")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map that byte-level BPE vocabularies are written in."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}
