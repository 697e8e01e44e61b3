"""Server-sent events, read and written the one way gateway, guardrails and benchmarks share (torch-free).

Reading follows the WHATWG event-stream rules (html.spec.whatwg.org, "Parsing an event stream"):

    stream  = [BOM] *event
    event   = *(comment / field) blank-line      a blank line dispatches the event
    line end: CRLF, LF or CR                     a CR that ends one chunk and an LF that opens the next are ONE end
    field   = name [":" [" "] value]             `data` lines accumulate, joined with LF

Two layers, because the gateway relays events without re-encoding them:
- `SseSplitter` cuts any chunking of a byte stream into complete events, still bytes (line ends normalized to LF,
  each event ending in a blank line), so a client never gets half an event and bytes pass through untouched;
- `parse_event` / `event_data` read one such event; `SseReader` is both together for clients that want events.

Writing: `encode_event` frames a payload, splitting multi-line data over several `data:` lines.
"""

from __future__ import annotations

from dataclasses import dataclass

DONE_DATA = b"[DONE]"
"""OpenAI's end-of-stream payload: `data: [DONE]`."""
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class SseEvent:
    data: str
    """Every `data` line's value, joined with LF."""
    event: str = "message"
    id: str | None = None
    retry_ms: int | None = None


class SseSplitter:
    """Bytes in, in whatever chunks the network gives; complete events out, each ending in b"\\n\\n"."""

    def __init__(self) -> None:
        self._pending = b""
        """The start of an event whose blank line has not arrived yet (line ends already LF)."""
        self._after_cr = False
        """The last chunk ended in CR: an LF opening the next one belongs to that line end."""
        self._at_start = True
        """Nothing read yet: a UTF-8 byte-order mark may open the stream."""

    def feed(self, chunk: bytes) -> bytes:
        """The complete events `chunk` finishes, concatenated (b"" while an event is still incomplete)."""
        if not chunk:
            return b""
        if self._at_start:
            self._at_start = False
            chunk = chunk.removeprefix(_BOM)
        if self._after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        if b"\r" in chunk:  # rare (servers send LF): the common path costs one scan
            self._after_cr = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        else:
            self._after_cr = False
        data = self._pending + chunk if self._pending else chunk
        end = data.rfind(b"\n\n")
        if end < 0:
            self._pending = data
            return b""
        self._pending = data[end + 2 :]
        return data[: end + 2]

    @property
    def pending(self) -> bytes:
        """What an incomplete last event holds: an event stream cut here loses it (the spec drops it too)."""
        return self._pending


def split_events(events: bytes) -> list[bytes]:
    """`SseSplitter.feed`'s output, one event each (without its blank line); blank-only stretches are dropped."""
    return [event for event in events.split(b"\n\n") if event.strip(b"\n")]


def event_data(event: bytes) -> bytes | None:
    """One event's data (its `data` lines' values joined with LF), None when it has no `data` line. Faster than
    `parse_event` where only the payload matters (OpenAI streams)."""
    if event.startswith(b"data: ") and b"\n" not in event:  # OpenAI's every event: one `data: ` line
        return event[6:]
    if b"\ndata" not in event and not event.startswith(b"data"):
        return None
    values = [_value(line, 4) for line in event.split(b"\n") if line.startswith(b"data") and _is_field(line, 4)]
    return b"\n".join(values) if values else None


def parse_event(event: bytes) -> SseEvent | None:
    """One complete event (as `SseSplitter` gives it); None when it dispatches nothing (no `data` line)."""
    data: list[bytes] = []
    name, event_id, retry_ms = b"", None, None
    for line in event.split(b"\n"):
        if not line or line[:1] == b":":  # a blank line, or a comment (keep-alives)
            continue
        field, _, value = line.partition(b":")
        value = value.removeprefix(b" ")
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value
        elif field == b"id" and b"\x00" not in value:
            event_id = value.decode("utf-8", "replace")
        elif field == b"retry" and value.isdigit():
            retry_ms = int(value)
    if not data:
        return None
    return SseEvent(
        b"\n".join(data).decode("utf-8", "replace"), name.decode("utf-8", "replace") or "message", event_id, retry_ms
    )


class SseReader:
    """Bytes in, parsed events out: `SseSplitter` and `parse_event` together."""

    def __init__(self) -> None:
        self._splitter = SseSplitter()

    def feed(self, chunk: bytes) -> list[SseEvent]:
        events = [parse_event(raw) for raw in split_events(self._splitter.feed(chunk))]
        return [event for event in events if event is not None]


def encode_event(data: str | bytes, event: str | None = None, event_id: str | None = None) -> bytes:
    """One event, framed: a `data:` line per line of `data` (so a payload with line ends survives the trip)."""
    payload = data.encode() if isinstance(data, str) else data
    if b"\r" in payload:
        payload = payload.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    head = b""
    if event is not None:
        head += b"event: " + event.encode() + b"\n"
    if event_id is not None:
        head += b"id: " + event_id.encode() + b"\n"
    return head + b"data: " + payload.replace(b"\n", b"\ndata: ") + b"\n\n"


def replace_data(event: bytes, data: bytes) -> bytes:
    """`event` (one complete event, as `split_events` gives it) with its data replaced by `data` (one line), its
    other fields kept in place: where the first `data` line was."""
    lines, out, placed = event.split(b"\n"), [], False
    for line in lines:
        if line.startswith(b"data") and _is_field(line, 4):
            if not placed:
                out.append(b"data: " + data)
                placed = True
            continue
        out.append(line)
    if not placed:
        out.append(b"data: " + data)
    return b"\n".join(out) + b"\n\n"


def _is_field(line: bytes, name_len: int) -> bool:
    """`line` names exactly the field its first `name_len` bytes spell (`data` or `data:...`, not `database:`)."""
    return len(line) == name_len or line[name_len : name_len + 1] == b":"


def _value(line: bytes, name_len: int) -> bytes:
    return line[name_len + 1 :].removeprefix(b" ")
