"""The block hashes a request is matched by, per block size; character blocks when there are no token ids.

Token hashes follow docs/architecture.md exactly (salted root, 16-token blocks by default), so they meet the hashes in a
replica's KV events. The request path fills `RouteRequest.block_hashes` at the model's block size (IndexConfig);
a replica whose snapshot announces another size gets hashes recomputed from the token ids at its size. Hashes
whose count does not fit that block size (a request path configured with another size) are recomputed too.

Without token ids (the model's tokenizer is unknown, e.g. an external OpenAI-compatible upstream) the prompt text
is cut into `chars_per_block` characters and hashed with the same chain over Unicode code points, from a root of
its own, so character hashes never collide with token hashes: they match only the router's own routing history.
"""

from __future__ import annotations

from gateway.routing.base import RouteRequest
from sluicegate.block_hash import block_hashes, root_hash

_CHAR_ROOT_TAG = "\x00chars\x00"


class RequestHashes:
    def __init__(self, request: RouteRequest, block_size: int, chars_per_block: int) -> None:
        self.request = request
        self.token_block_size = block_size
        self.chars_per_block = chars_per_block
        self.by_tokens = request.prompt_token_ids is not None
        self._cache: dict[int, list[int]] = {}
        if (
            request.prompt_token_ids is not None
            and len(request.block_hashes) == len(request.prompt_token_ids) // block_size
        ):
            self._cache[block_size] = request.block_hashes

    @property
    def prompt_tokens(self) -> int:
        if self.by_tokens:
            assert self.request.prompt_token_ids is not None  # by_tokens
            return len(self.request.prompt_token_ids)
        return len(self.request.prompt_text)

    @property
    def block_size(self) -> int:
        """Tokens (or characters) per block of `history_hashes()`."""
        return self.token_block_size if self.by_tokens else self.chars_per_block

    def token_hashes(self, block_size: int) -> list[int]:
        """Hashes comparable with a replica's KV events; empty without token ids."""
        if not self.by_tokens:
            return []
        if block_size not in self._cache:
            assert self.request.prompt_token_ids is not None  # by_tokens
            self._cache[block_size] = block_hashes(self.request.prompt_token_ids, block_size, self.request.cache_salt)
        return self._cache[block_size]

    def history_hashes(self) -> list[int]:
        """Hashes the routing history records: token hashes at the model's block size, else character hashes."""
        if self.by_tokens:
            return self.token_hashes(self.token_block_size)
        if -1 not in self._cache:
            text = self.request.prompt_text
            codepoints = [ord(ch) for ch in text]
            parent = root_hash(_CHAR_ROOT_TAG + self.request.cache_salt)
            self._cache[-1] = block_hashes(codepoints, self.chars_per_block, parent_hash=parent)
        return self._cache[-1]

    def fallback_key(self) -> int:
        """A key for hashing policies when the prompt is shorter than one block."""
        prefix = self.request.prompt_text[: self.chars_per_block]
        return block_hashes([ord(ch) for ch in prefix] or [0], max(1, len(prefix)), self.request.cache_salt)[0]
