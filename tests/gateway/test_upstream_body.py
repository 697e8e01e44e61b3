"""The body the gateway sends upstream: members it adds are spliced into the client's bytes, not re-encoded; what a
handoff covers, for the decode hop's routing."""

from __future__ import annotations

import json

from gateway.request.body import handed_over_tokens
from gateway.request.body import splice as _splice


def test_a_splice_adds_members_and_keeps_the_clients_bytes():
    raw = ' \n{"model": "tiny", "messages": [{"role": "user", "content": "caf\u00e9 {not a brace}"}]}'.encode()
    spliced = _splice(raw, {"stream_options": {"include_usage": True}, "cache_salt": "acme"})
    assert json.loads(spliced) == {**json.loads(raw), "stream_options": {"include_usage": True}, "cache_salt": "acme"}
    assert spliced.endswith(raw[raw.index(b"{") + 1 :])  # the prompt went through byte for byte


def test_the_tokens_a_handoff_covers_are_read_from_its_params_or_taken_as_none():
    assert handed_over_tokens({"remote_num_tokens": 1072, "remote_block_ids": [1, 2]}) == 1072
    for odd in ({}, {"remote_num_tokens": None}, {"remote_num_tokens": "1072"}, {"remote_num_tokens": True}):
        assert handed_over_tokens(odd) == 0
    assert handed_over_tokens({"remote_num_tokens": -5}) == 0
