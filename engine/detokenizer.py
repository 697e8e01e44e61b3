"""Incremental detokenization with stop strings.

Two promises to a streaming client: a delta never ends inside a UTF-8 character (tokenizers' DecodeStream yields
nothing until a character is complete), and text that could still turn out to be the start of a stop string is
held back until it cannot (a stop string is never part of the output, so emitting its first half would be a lie).
"""

from __future__ import annotations

import functools

from tokenizers.decoders import DecodeStream

# Prompt tokens fed to the decode stream first, so the first output token decodes with its real left context
# (SentencePiece-style tokenizers drop a leading space otherwise).
_PROMPT_CONTEXT_TOKENS = 4
# A UTF-8 character has at most 4 bytes, so at most 3 of its byte tokens sit on one side of a token-window edge.
_MAX_PARTIAL_CHAR_TOKENS = 3
_REPLACEMENT_CHAR = "\ufffd"  # what a decoder writes for bytes that are not (yet) a whole character


class IncrementalDetokenizer:
    def __init__(self, tokenizer, prompt_token_ids: list[int], stop: list[str], skip_special_tokens: bool):
        self._tokenizer = tokenizer  # a tokenizers.Tokenizer (the fast backend, not the transformers wrapper)
        context, unfinished, context_text, tail_text = _split_prompt_tail(
            tokenizer, prompt_token_ids, skip_special_tokens
        )
        self._stream = DecodeStream(context, skip_special_tokens)
        # A prompt that ends inside a character: its last tokens go into the stream after the context (each step
        # returns None, as the text still ends unfinished), so the output token that finishes the character yields
        # all of it. That first piece starts with the prompt text after the context: whole characters, then the
        # unfinished bytes as replacement characters if the output did not finish them. Neither is output.
        whole_chars = tail_text.rstrip(_REPLACEMENT_CHAR)
        self._prompt_in_first_piece = (
            (len(whole_chars) - len(context_text), len(tail_text) - len(whole_chars)) if unfinished else None
        )
        for token_id in unfinished:
            self._stream.step(tokenizer, token_id)
        # One matcher per distinct stop string, in the caller's order (it breaks ties between equal starts).
        self._matchers = [_StopMatcher(s) for s in dict.fromkeys(stop)]
        self.text = ""
        self.num_emitted_chars = 0

    def append(self, token_id: int, check_stop: bool = True) -> str | None:
        """Add one output token; return the stop string it completed, if any (the text is cut before it)."""
        piece = self._stream.step(self._tokenizer, token_id)
        if not piece:
            return None
        if self._prompt_in_first_piece:
            num_whole_chars, num_replacement_chars = self._prompt_in_first_piece
            piece = piece[num_whole_chars:]
            piece = piece[min(num_replacement_chars, len(piece) - len(piece.lstrip(_REPLACEMENT_CHAR))) :]
            self._prompt_in_first_piece = None
            if not piece:
                return None
        old_len = len(self.text)
        self.text += piece
        if not self._matchers:  # no stop strings: nothing to match, which is most requests
            return None
        best = None  # (start in text, stop string) of the earliest match
        for matcher in self._matchers:
            # Matchers advance even while checks are off (min_tokens): the hold-back needs their state. Only a
            # match that ends in the new piece is new: text written while checks were off was streamed already
            # and must not stop the request now.
            end = matcher.feed(piece)
            if end is not None and check_stop:
                at = old_len + end - len(matcher.stop)
                if best is None or at < best[0]:
                    best = (at, matcher.stop)
        if best is None:
            return None
        self.text = self.text[: best[0]]  # the request ends here, so the matchers' states no longer matter
        return best[1]

    def take_delta(self, final: bool) -> str:
        """Text that is safe to emit now and was not emitted before."""
        text, emitted = self.text, self.num_emitted_chars
        end = len(text) if final or not self._matchers else len(text) - self._held_back_chars()
        if end <= emitted:
            return ""
        self.num_emitted_chars = end
        return text[emitted:end]

    def _held_back_chars(self) -> int:
        """Length of the longest suffix of the text that is a proper prefix of a stop string."""
        if not self._matchers:
            return 0
        return max(m.matched_chars for m in self._matchers)


class _StopMatcher:
    """Knuth-Morris-Pratt over the text as it grows, for one stop string: `matched_chars` is the length of the
    longest suffix of the text so far that is a proper prefix of the stop string. Feeding a piece costs its length
    (amortized), whatever the stop string's length: the text before it is never looked at again."""

    def __init__(self, stop: str):
        self.stop = stop
        self._fallback = _fallback_table(stop)
        self.matched_chars = 0

    def feed(self, piece: str) -> int | None:
        """Advance over the piece; return the offset in it just past the first complete match, if any."""
        stop, fallback, state = self.stop, self._fallback, self.matched_chars
        first_end = None
        i = 0
        while i < len(piece):
            if state == 0:
                i = piece.find(stop[0], i)  # a C-speed skip over text that cannot start a match
                if i == -1:
                    break
            char = piece[i]
            while state and stop[state] != char:
                state = fallback[state - 1]
            if stop[state] == char:
                state += 1
                if state == len(stop):
                    if first_end is None:
                        first_end = i + 1
                    state = fallback[state - 1]  # matches may overlap: go on from the longest border
            i += 1
        self.matched_chars = state
        return first_end


@functools.lru_cache(maxsize=128)
def _fallback_table(stop: str) -> tuple[int, ...]:
    """KMP prefix function: entry j is the length of the longest proper prefix of stop[: j + 1] that is also its
    suffix. Cached: the n sequences of a request, and repeated requests, share their stop strings."""
    table = [0] * len(stop)
    border = 0
    for j in range(1, len(stop)):
        while border and stop[j] != stop[border]:
            border = table[border - 1]
        if stop[j] == stop[border]:
            border += 1
        table[j] = border
    return tuple(table)


def _split_prompt_tail(
    tokenizer, prompt_token_ids: list[int], skip_special_tokens: bool
) -> tuple[list[int], list[int], str, str]:
    """The last prompt tokens as (context, unfinished, the context's text, the text of both). The window starts at a
    character boundary (a start inside a character decodes as replacement characters, and the output's text is
    measured from the window's); the context is its longest head whose text does not end in a replacement character
    (DecodeStream takes no prefix from such a context, and would repeat all of it in the output)."""
    num_tokens = len(prompt_token_ids)
    start = max(0, num_tokens - _PROMPT_CONTEXT_TOKENS)
    min_start = max(0, start - _MAX_PARTIAL_CHAR_TOKENS)
    tail_text = _decode(tokenizer, prompt_token_ids[start:], skip_special_tokens)
    while start > min_start and tail_text.startswith(_REPLACEMENT_CHAR):
        start -= 1
        tail_text = _decode(tokenizer, prompt_token_ids[start:], skip_special_tokens)
    end, context_text = num_tokens, tail_text
    while end > start and context_text.endswith(_REPLACEMENT_CHAR):
        end -= 1
        context_text = _decode(tokenizer, prompt_token_ids[start:end], skip_special_tokens)
    return prompt_token_ids[start:end], prompt_token_ids[end:], context_text, tail_text


def _decode(tokenizer, token_ids: list[int], skip_special_tokens: bool) -> str:
    return tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
