"""The SSE scanner: whole events out whatever the chunking, usage spotted (and stripped when not asked for), and the
delivered text kept for counting without holding a long stream's raw bytes."""

from __future__ import annotations

import json

import pytest

from gateway.request.stream import COMPACT_BYTES, StreamScanner


def _stream(num_events: int) -> tuple[bytes, str]:
    events, text = [], []
    for i in range(num_events):
        piece = f"tok{i} é "
        text.append(piece)
        chunk = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": piece}}]}
        events.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    usage = {"prompt_tokens": 3, "completion_tokens": num_events, "total_tokens": 3 + num_events}
    events.append(b"data: " + json.dumps({"id": "c", "choices": [], "usage": usage}).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return b"".join(events), "".join(text)


@pytest.mark.parametrize("chunk_bytes", [1, 7, 64, 4096])
def test_whole_events_out_usage_stripped_text_kept(chunk_bytes):
    raw, text = _stream(3000)  # ~300 KB of SSE: compacted several times on the way
    scanner = StreamScanner(strip_usage=True)
    out, peak_raw_bytes = [], 0
    for start in range(0, len(raw), chunk_bytes):
        forwarded = scanner.feed(raw[start : start + chunk_bytes])
        assert not forwarded or forwarded.endswith(b"\n\n")
        out.append(forwarded)
        peak_raw_bytes = max(peak_raw_bytes, scanner._raw_bytes)
    assert scanner.saw_done and scanner.usage["completion_tokens"] == 3000
    assert b'"usage"' not in b"".join(out)
    assert scanner.delivered_text() == text
    assert peak_raw_bytes <= COMPACT_BYTES + chunk_bytes + 256  # never the whole stream's bytes


def test_usage_kept_when_the_client_asked():
    raw, _ = _stream(3)
    scanner = StreamScanner(strip_usage=False)
    assert b'"usage"' in scanner.feed(raw) and scanner.usage["total_tokens"] == 6


def test_crlf_streams_split_between_cr_and_lf_and_multi_line_usage():
    usage = b'data: {"id": "c", "choices": [],\r\ndata:  "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\r\n\r\n'
    raw = b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\r\n\r\n' + usage + b"data: [DONE]\r\n\r\n"
    cut = raw.index(b"\r\n\r\n") + 1  # between a CR and its LF
    scanner = StreamScanner(strip_usage=True)
    out = scanner.feed(raw[:cut]) + scanner.feed(raw[cut:])
    assert scanner.usage == {"prompt_tokens": 3, "completion_tokens": 2}  # read across both of its data lines
    assert out == b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\n\ndata: [DONE]\n\n'
    assert scanner.saw_done and scanner.delivered_text() == "a"
