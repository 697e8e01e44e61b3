"""Reading an upstream's OpenAI SSE stream on the way through, without re-encoding it.

The scanner cuts the byte stream at event boundaries (sluicegate/sse.py's `SseSplitter`, so a client never
receives half an event), spots the usage chunk (parsed only when the bytes contain a usage object), drops it when
the client did not ask for usage, and keeps what it delivered so that, if the upstream never reports usage, the
completion can be counted afterwards: the raw events until they pass COMPACT_BYTES, then only their text (SSE JSON
is ~5-10x the text it carries, and a long stream times many clients must not hold megabytes each; parsing in
64 KiB batches costs what parsing every event would, once).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sluicegate.sse import DONE_DATA, SseSplitter, encode_event, event_data, replace_data, split_events

COMPACT_BYTES = 64 << 10
_USAGE_MARKERS = (b'"usage":{', b'"usage": {')


class StreamScanner:
    def __init__(
        self, strip_usage: bool, rewrite_usage: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None
    ) -> None:
        self._strip_usage = strip_usage
        self._rewrite_usage = rewrite_usage
        """Another usage for the client to see, or None to keep the upstream's (its event passes as it came)."""
        self._splitter = SseSplitter()
        self.usage: dict[str, Any] | None = None
        self.saw_done = False
        self._raw: list[bytes] = []  # delivered events not yet reduced to text
        self._raw_bytes = 0
        self._text: list[str] = []

    def feed(self, chunk: bytes) -> bytes:
        """Upstream bytes in; the complete events to forward out (b"" while an event is still incomplete)."""
        events = self._splitter.feed(chunk)
        if not events:
            return b""
        if _USAGE_MARKERS[0] in events or _USAGE_MARKERS[1] in events:
            events = self._take_usage(events)
        if DONE_DATA in events and not self.saw_done:  # once a stream, at its end: confirmed by the parser
            self.saw_done = any(event_data(e) == DONE_DATA for e in split_events(events) if DONE_DATA in e)
        if events:
            self._raw.append(events)
            self._raw_bytes += len(events)
            if self._raw_bytes > COMPACT_BYTES:
                self._compact()
        return events

    def delivered_text(self) -> str:
        """The completion text delivered so far (chat deltas or completion text)."""
        self._compact()
        return "".join(self._text)

    def _compact(self) -> None:
        if self._raw:
            self._text.append(_events_text(b"".join(self._raw)))
            self._raw, self._raw_bytes = [], 0

    def _take_usage(self, events: bytes) -> bytes:
        """Reads the usage event among `events`; returns them without it when the client did not ask for usage, with
        the usage rewritten when `rewrite_usage` says so."""
        changed = False
        kept = []
        for event in split_events(events):
            # only the event that names usage is parsed: the others pass as they came
            if _USAGE_MARKERS[0] in event or _USAGE_MARKERS[1] in event:
                payload = event_data(event)
                try:
                    obj = json.loads(payload) if payload is not None else None
                except ValueError:
                    obj = None
                if isinstance(obj, dict) and isinstance(obj.get("usage"), dict):
                    self.usage = obj["usage"]
                    if self._strip_usage and not obj.get("choices"):
                        changed = True
                        continue
                    shown = self._rewrite_usage(obj["usage"]) if self._rewrite_usage is not None else None
                    if shown is not None:
                        data = json.dumps({**obj, "usage": shown}, ensure_ascii=False).encode()
                        event = replace_data(event, data)[:-2]  # kept events are joined with their blank line below
                        changed = True
            kept.append(event)
        return b"".join(event + b"\n\n" for event in kept) if changed else events


def _events_text(events: bytes) -> str:
    parts = []
    for event in split_events(events):
        payload = event_data(event)
        if not payload or payload == DONE_DATA:
            continue
        try:
            obj = json.loads(payload)
        except ValueError:
            continue
        parts.extend(choice_texts(obj, streaming=True))
    return "".join(parts)


def choice_texts(obj: object, streaming: bool) -> list[str]:
    texts = []
    choices = obj.get("choices") if isinstance(obj, dict) else None
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict):
            continue
        holder = choice.get("delta" if streaming else "message")
        text = holder.get("content") if isinstance(holder, dict) else choice.get("text")
        if isinstance(text, str):
            texts.append(text)
    return texts


def error_event(message: str, code: str) -> bytes:
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
    return encode_event(json.dumps(body))
