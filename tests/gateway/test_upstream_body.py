"""The body the gateway sends upstream: members it adds are spliced into the client's bytes, not re-encoded."""

from __future__ import annotations

import json

from gateway.request.body import splice as _splice


def test_a_splice_adds_members_and_keeps_the_clients_bytes():
    raw = ' \n{"model": "tiny", "messages": [{"role": "user", "content": "caf\u00e9 {not a brace}"}]}'.encode()
    spliced = _splice(raw, {"stream_options": {"include_usage": True}, "cache_salt": "acme"})
    assert json.loads(spliced) == {**json.loads(raw), "stream_options": {"include_usage": True}, "cache_salt": "acme"}
    assert spliced.endswith(raw[raw.index(b"{") + 1 :])  # the prompt went through byte for byte
