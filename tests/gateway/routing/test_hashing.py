"""The hashes a request is matched by: docs/architecture.md's chain per block size, or character blocks without
token ids."""

from __future__ import annotations

from gateway.routing.base import RouteRequest
from gateway.routing.hashing import RequestHashes
from sluicegate.block_hash import block_hashes

TOKENS = list(range(100))


def test_the_request_paths_hashes_are_used_and_other_sizes_recomputed():
    provided = block_hashes(TOKENS, 16, "t")
    hashes = RequestHashes(RouteRequest("m", TOKENS, "", 1, "t", provided), 16, 64)
    assert hashes.token_hashes(16) is provided
    assert hashes.token_hashes(32) == block_hashes(TOKENS, 32, "t")
    assert hashes.history_hashes() is provided
    assert (hashes.prompt_tokens, hashes.block_size) == (100, 16)


def test_hashes_of_another_block_size_than_configured_are_recomputed():
    provided_at_32 = block_hashes(TOKENS, 32)  # 3 hashes where 16-token blocks give 6
    hashes = RequestHashes(RouteRequest("m", TOKENS, "", 1, "", provided_at_32), 16, 64)
    assert hashes.token_hashes(16) == block_hashes(TOKENS, 16)


def test_without_token_ids_text_is_hashed_in_character_blocks_of_its_own_space():
    text = "x" * 130
    hashes = RequestHashes(RouteRequest("m", None, text, 1), 16, 64)
    assert hashes.token_hashes(16) == []
    chars = hashes.history_hashes()
    assert len(chars) == 2 and (hashes.prompt_tokens, hashes.block_size) == (130, 64)
    assert chars[0] != block_hashes([ord("x")] * 64, 64)[0]  # never equal to a token chain over the same ids
    salted = RequestHashes(RouteRequest("m", None, text, 1, cache_salt="t"), 16, 64).history_hashes()
    assert salted[0] != chars[0]
    short = RequestHashes(RouteRequest("m", None, "hi", 1), 16, 64)
    assert (
        short.history_hashes() == []
        and short.fallback_key() != RequestHashes(RouteRequest("m", None, "ho", 1), 16, 64).fallback_key()
    )
