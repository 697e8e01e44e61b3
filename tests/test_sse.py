"""sluicegate/sse.py against the WHATWG event-stream rules: line ends CRLF, LF or CR (a CRLF split across chunks is
one), multi-line `data`, comments, field parsing, and the same events whatever the chunking."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from sluicegate.sse import (
    SseEvent,
    SseReader,
    SseSplitter,
    encode_event,
    event_data,
    parse_event,
    replace_data,
    split_events,
)


def _read(chunks: list[bytes]) -> list[SseEvent]:
    reader = SseReader()
    return [event for chunk in chunks for event in reader.feed(chunk)]


def test_crlf_split_across_chunks_is_one_line_end():
    # "data: a\r" | "\ndata: b": the CR and LF are one line end, not a line end and a blank line (two events)
    assert _read([b"data: a\r", b"\ndata: b\r\n\r\n"]) == [SseEvent("a\nb")]
    splitter = SseSplitter()
    assert splitter.feed(b"data: a\r") == b"" and splitter.feed(b"\ndata: b\r\n\r") == b"data: a\ndata: b\n\n"


def test_a_lone_cr_ends_a_line():
    assert _read([b"data: a\rdata: b\r\r"]) == [SseEvent("a\nb")]


def test_cr_at_a_chunk_end_then_a_blank_line_of_its_own():
    # "\r" then "\r": two line ends, the second blank: the event is dispatched when the second chunk arrives
    reader = SseReader()
    assert reader.feed(b"data: x\r") == []
    assert reader.feed(b"\r") == [SseEvent("x")]
    assert reader.feed(b"\ndata: y\n\n") == [SseEvent("y")]  # that LF ended the blank CR line: no empty line


def test_multi_line_data_is_joined_with_lf():
    raw = b'data: {"a":\ndata: 1}\n\n'
    assert _read([raw]) == [SseEvent('{"a":\n1}')]
    assert json.loads(event_data(raw.rstrip(b"\n"))) == {"a": 1}


def test_fields_comments_and_the_optional_space():
    raw = b": keep-alive\nevent: snapshot\nid: 7\nretry: 1500\ndata:no-space\ndata\ndatabase: not data\n\n"
    assert _read([raw]) == [SseEvent("no-space\n", "snapshot", "7", 1500)]


def test_an_event_without_data_dispatches_nothing_and_a_cut_event_is_dropped():
    assert _read([b"event: ping\n\n: comment\n\ndata: kept\n\ndata: cut"]) == [SseEvent("kept")]


def test_a_byte_order_mark_opens_the_stream():
    assert _read([b"\xef\xbb\xbfdata: a\n\n"]) == [SseEvent("a")]


def test_the_splitter_passes_lf_streams_through_unchanged():
    raw = b'data: {"x": 1}\n\ndata: [DONE]\n\n'
    splitter = SseSplitter()
    assert splitter.feed(raw[:5]) == b""
    assert splitter.feed(raw[5:]) == raw and splitter.pending == b""


def test_writer_round_trips_multi_line_payloads():
    framed = encode_event("line one\nline two\r\nline three", event="note", event_id="3")
    assert framed == b"event: note\nid: 3\ndata: line one\ndata: line two\ndata: line three\n\n"
    assert _read([framed]) == [SseEvent("line one\nline two\nline three", "note", "3")]


def test_replace_data_keeps_other_fields_where_they_were():
    event = split_events(b'id: 1\ndata: {"a":\ndata: 1}\nevent: e\n\n')[0]
    assert replace_data(event, b'{"a":2}') == b'id: 1\ndata: {"a":2}\nevent: e\n\n'
    assert parse_event(b": only a comment") is None


# ---- property: any chunking of a stream reads as the same events ------------------------------------------------
_LINE_ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])
_TEXT = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12)


@st.composite
def _streams(draw) -> tuple[bytes, list[SseEvent]]:
    """A stream written with random line ends, and the events it must read as."""
    out, expected = b"", []
    for _ in range(draw(st.integers(0, 6))):
        lines = draw(st.lists(_TEXT, min_size=1, max_size=4))
        name = draw(st.sampled_from([None, "update"]))
        if draw(st.booleans()):
            out += b":" + draw(_TEXT).encode() + draw(_LINE_ENDS)
        if name is not None:
            out += b"event: " + name.encode() + draw(_LINE_ENDS)
        for line in lines:
            end = draw(_LINE_ENDS)
            out += b"data: " + line.encode() + end
        blank = draw(_LINE_ENDS)
        out += b"\r" if end == b"\r" and blank == b"\n" else blank  # CR then LF would be one line end, not two
        expected.append(SseEvent("\n".join(lines), name or "message"))
    return out, expected


@st.composite
def _chunkings(draw, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    edges = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:])]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_chunking_reads_as_the_same_events(data):
    raw, expected = data.draw(_streams())
    chunks = data.draw(_chunkings(raw))
    assert _read(chunks) == expected
    assert _read([raw]) == expected


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_splitter_emits_whole_events_whatever_the_chunking(data):
    raw, expected = data.draw(_streams())
    splitter = SseSplitter()
    out = []
    for chunk in data.draw(_chunkings(raw)):
        forwarded = splitter.feed(chunk)
        assert not forwarded or forwarded.endswith(b"\n\n")
        out.append(forwarded)
    events = [parse_event(e) for e in split_events(b"".join(out))]
    assert [e for e in events if e is not None] == expected
