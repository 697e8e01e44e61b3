"""OpenAI's response shapes for the two generation endpoints: whole responses, stream chunks, and logprobs.

`CompletionFormat` (/v1/completions, object "text_completion", choices carry `text`) and `ChatFormat`
(/v1/chat/completions, "chat.completion" / "chat.completion.chunk", choices carry `message` / `delta`) share one
interface, so generation.py drives both the same way.
"""

from __future__ import annotations

import math

from engine.outputs import TokenLogprob
from engine.server.tokenization import Tokenization

# JSON has no -Infinity; a token the sampler could never pick gets this floor instead (as vLLM does).
_MIN_LOGPROB = -9999.0


def _finite(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else _MIN_LOGPROB


class CompletionFormat:
    id_prefix = "cmpl-"
    object_name = "text_completion"
    chunk_object_name = "text_completion"

    def __init__(self, tokenization: Tokenization):
        self._tok = tokenization

    def choice(self, index: int, text: str, logprobs: list[TokenLogprob] | None, finish_reason: str | None) -> dict:
        return {
            "index": index,
            "text": text,
            "logprobs": self.logprobs(logprobs, 0) if logprobs is not None else None,
            "finish_reason": finish_reason,
        }

    def opening_deltas(self, index: int) -> list[dict]:
        return []

    def delta(self, index: int, text: str, logprobs: list[TokenLogprob] | None, text_offset: int) -> dict:
        return {
            "index": index,
            "text": text,
            "logprobs": self.logprobs(logprobs, text_offset) if logprobs is not None else None,
            "finish_reason": None,
        }

    def finish_delta(self, index: int, finish_reason: str) -> dict:
        return {"index": index, "text": "", "logprobs": None, "finish_reason": finish_reason}

    def logprobs(self, entries: list[TokenLogprob], text_offset: int) -> dict:
        """{"tokens", "token_logprobs", "top_logprobs", "text_offset"}; offsets are characters into the choice's
        text, continuing from `text_offset` for stream chunks (a special token is listed but, left out of the
        text, takes no characters). `top_logprobs` is a dict by token text, as OpenAI's: tokens with one text (the
        parts of one UTF-8 character all read "\ufffd") keep the likeliest's logprob, not the last one's."""
        tokens, offsets, special = [], [], self._tok.special_ids
        for entry in entries:
            token = self._tok.token_text(entry.token_id)
            tokens.append(token)
            offsets.append(text_offset)
            text_offset += 0 if entry.token_id in special else len(token)
        return {
            "tokens": tokens,
            "token_logprobs": [_finite(e.logprob) for e in entries],
            "top_logprobs": [self._top(entry) for entry in entries],
            "text_offset": offsets,
        }

    def _top(self, entry: TokenLogprob) -> dict[str, float]:
        top: dict[str, float] = {}
        for token_id, logprob in entry.top:  # best first
            top.setdefault(self._tok.token_text(token_id), _finite(logprob))
        return top


class ChatFormat:
    id_prefix = "chatcmpl-"
    object_name = "chat.completion"
    chunk_object_name = "chat.completion.chunk"

    def __init__(self, tokenization: Tokenization):
        self._tok = tokenization

    def choice(self, index: int, text: str, logprobs: list[TokenLogprob] | None, finish_reason: str | None) -> dict:
        return {
            "index": index,
            "message": {"role": "assistant", "content": text},
            "logprobs": self.logprobs(logprobs, 0) if logprobs is not None else None,
            "finish_reason": finish_reason,
        }

    def opening_deltas(self, index: int) -> list[dict]:
        role = {"role": "assistant", "content": ""}
        return [{"index": index, "delta": role, "logprobs": None, "finish_reason": None}]

    def delta(self, index: int, text: str, logprobs: list[TokenLogprob] | None, text_offset: int) -> dict:
        return {
            "index": index,
            "delta": {"content": text},
            "logprobs": self.logprobs(logprobs, text_offset) if logprobs is not None else None,
            "finish_reason": None,
        }

    def finish_delta(self, index: int, finish_reason: str) -> dict:
        return {"index": index, "delta": {}, "logprobs": None, "finish_reason": finish_reason}

    def logprobs(self, entries: list[TokenLogprob], text_offset: int) -> dict:
        """{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}."""
        return {
            "content": [
                {**self._token(e.token_id, e.logprob), "top_logprobs": [self._token(t, lp) for t, lp in e.top]}
                for e in entries
            ]
        }

    def _token(self, token_id: int, logprob: float) -> dict:
        return {
            "token": self._tok.token_text(token_id),
            "logprob": _finite(logprob),
            "bytes": list(self._tok.token_bytes(token_id)),
        }
