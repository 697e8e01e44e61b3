"""Incremental detokenization with stop strings.

Two promises to a streaming client: a delta never ends inside a UTF-8 character (tokenizers' DecodeStream yields
nothing until a character is complete), and text that could still turn out to be the start of a stop string is
held back until it cannot (a stop string is never part of the output, so emitting its first half would be a lie).
"""

from __future__ import annotations

from tokenizers.decoders import DecodeStream

# Prompt tokens fed to the decode stream first, so the first output token decodes with its real left context
# (SentencePiece-style tokenizers drop a leading space otherwise).
_PROMPT_CONTEXT_TOKENS = 4


class IncrementalDetokenizer:
    def __init__(self, tokenizer, prompt_token_ids: list[int], stop: list[str], skip_special_tokens: bool):
        self._tokenizer = tokenizer  # a tokenizers.Tokenizer (the fast backend, not the transformers wrapper)
        self._stream = DecodeStream(prompt_token_ids[-_PROMPT_CONTEXT_TOKENS:], skip_special_tokens)
        self._stop = stop
        self.text = ""
        self.num_emitted_chars = 0

    def append(self, token_id: int, check_stop: bool = True) -> str | None:
        """Add one output token; return the stop string it completed, if any (the text is cut before it)."""
        piece = self._stream.step(self._tokenizer, token_id)
        if not piece:
            return None
        old_len = len(self.text)
        self.text += piece
        if not self._stop or not check_stop:
            return None
        best = None
        for stop in self._stop:
            # Only a match that ends in the new piece is new: text written while checks were off (min_tokens)
            # was streamed already and must not stop the request now.
            at = self.text.find(stop, max(0, old_len - len(stop) + 1))
            if at != -1 and (best is None or at < best[0]):
                best = (at, stop)
        if best is None:
            return None
        self.text = self.text[: best[0]]
        return best[1]

    def take_delta(self, final: bool) -> str:
        """Text that is safe to emit now and was not emitted before."""
        end = len(self.text) if final else len(self.text) - self._held_back_chars()
        if end <= self.num_emitted_chars:
            return ""
        delta = self.text[self.num_emitted_chars : end]
        self.num_emitted_chars = end
        return delta

    def _held_back_chars(self) -> int:
        """Length of the longest suffix of the text that is a proper prefix of a stop string. Candidates start where
        the stop's first character occurs in the last len(stop) - 1 characters (a C-speed find, not a slice per
        prefix length: a long stop string must not make each token cost its length squared)."""
        longest = 0
        for stop in self._stop:
            start = max(0, len(self.text) - len(stop) + 1)
            at = self.text.find(stop[0], start)
            while at != -1 and len(self.text) - at > longest:
                if stop.startswith(self.text[at:]):
                    longest = len(self.text) - at
                    break
                at = self.text.find(stop[0], at + 1)
        return longest
