"""A choice's `logprobs` redacted like its text: each token string is the text it scores, and its `top_logprobs`
alternatives are what the model nearly wrote, so an address redacted in `content` was still there, token by token.

A token whose characters overlap a redacted span gets the redacted text of its span (the placeholder in the token
where the entity begins, nothing in the tokens after it; or stars, when masking), `bytes` to match, and no
alternatives. Tokens are located by concatenation: they must spell the text (the engine's and vLLM's do). When they
do not, a whole response's logprobs are dropped (`null`) if anything was redacted; in a stream, the tokens of a
chunk that do not spell its delta are treated as one piece spanning the delta.

Both shapes: /v1/chat/completions (`{"content": [{"token", "logprob", "bytes", "top_logprobs"}]}`) and
/v1/completions (`{"tokens", "token_logprobs", "top_logprobs", "text_offset"}`; offsets recomputed). In a stream,
StreamLogprobs holds each token back until the StreamRedactor has released (and redacted) its characters.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from guardrails.findings import Finding, replacement
from guardrails.request_fields import CHAT

Position = dict[str, Any]
"""One token position: the chat entry as it is; for completions {"token", "logprob", "top", "offset"}."""


def positions(route_kind: str, logprobs: Any) -> list[Position] | None:
    """The token positions of a logprobs object, or None when it has none or an unexpected shape."""
    if not isinstance(logprobs, dict):
        return None
    if route_kind == CHAT:
        content = logprobs.get("content")
        if not isinstance(content, list) or not all(
            isinstance(p, dict) and isinstance(p.get("token"), str) for p in content
        ):
            return None
        return content
    tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
    tops, offsets = logprobs.get("top_logprobs"), logprobs.get("text_offset")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        return None
    count = len(tokens)
    return [
        {"token": token, "logprob": _at(values, i, count), "top": _at(tops, i, count), "offset": _at(offsets, i, count)}
        for i, token in enumerate(tokens)
    ]


def rebuild(
    route_kind: str, original: dict[str, Any], kept: list[Position], first_offset: int | None
) -> dict[str, Any]:
    """A logprobs object of the same shape holding `kept`; completions' text offsets continue from `first_offset`."""
    if route_kind == CHAT:
        return {**original, "content": kept}
    offsets: list[int] = []
    offset = first_offset if first_offset is not None else 0
    for position in kept:
        offsets.append(offset)
        offset += len(position["token"])
    return {
        "tokens": [p["token"] for p in kept],
        "token_logprobs": [p["logprob"] for p in kept],
        "top_logprobs": [p["top"] for p in kept],
        "text_offset": offsets,
    }


def redact_choice(route_kind: str, choice: dict[str, Any], text: str, findings: list[Finding], style: str) -> None:
    """In place: a whole (non-streamed) choice's logprobs, redacted like its `text` was with `findings`."""
    if not findings or choice.get("logprobs") is None:
        return
    found = positions(route_kind, choice["logprobs"])
    if found is None or "".join(p["token"] for p in found) != text:
        choice["logprobs"] = None
        return
    kept: list[Position] = []
    start = 0
    for position in found:
        end = start + len(position["token"])
        kept.append(_redacted(route_kind, _Held(position, start, end, True, True), findings, style))
        start = end
    first = found[0].get("offset") if found and route_kind != CHAT else None
    choice["logprobs"] = rebuild(route_kind, choice["logprobs"], kept, first if isinstance(first, int) else 0)


@dataclass(slots=True)
class _Held:
    position: Position
    start: int
    end: int
    aligned: bool
    """The token spells [start, end); else it is one of a chunk's tokens that together span it."""
    lead: bool
    """The first (or only) token of its span: the one that may carry a placeholder."""


class StreamLogprobs:
    """One streamed choice's logprobs, released with the characters they score."""

    def __init__(self, route_kind: str, style: str) -> None:
        self.route_kind = route_kind
        self.style = style
        self.seen = False
        """Some chunk carried logprobs: every outgoing chunk of this choice carries them too (maybe empty)."""
        self._held: list[_Held] = []
        self._received_chars = 0
        self._redactions: list[Finding] = []
        self._shape: dict[str, Any] = {}
        self._next_offset: int | None = None

    def add(self, logprobs: Any, text: str) -> None:
        """A chunk's logprobs and its delta text (before redaction)."""
        start = self._received_chars
        self._received_chars += len(text)
        found = positions(self.route_kind, logprobs)
        if found is None:
            return
        self.seen = True
        self._shape = {k: v for k, v in logprobs.items() if k != "content"} if self.route_kind == CHAT else {}
        if self._next_offset is None and found and isinstance(found[0].get("offset"), int):
            self._next_offset = found[0]["offset"]
        if "".join(p["token"] for p in found) == text:
            for position in found:
                end = start + len(position["token"])
                self._held.append(_Held(position, start, end, True, True))
                start = end
        else:
            self._held += [_Held(p, start, start + len(text), False, i == 0) for i, p in enumerate(found)]

    def release(self, released_chars: int, redactions: list[Finding], final: bool) -> dict[str, Any] | None:
        """The logprobs for the outgoing chunk: every held token whose characters the redactor has released
        (`released_chars`, `redactions` from StreamRedactor), redacted alike; None if no chunk had any."""
        self._redactions += redactions
        if not self.seen:
            return None
        out: list[Position] = []
        while self._held and (final or max(self._held[0].end, self._held[0].start + 1) <= released_chars):
            held = self._held.pop(0)
            out.append(_redacted(self.route_kind, held, self._redactions, self.style))
        horizon = self._held[0].start if self._held else released_chars
        self._redactions = [r for r in self._redactions if r.end > horizon]
        built = rebuild(self.route_kind, self._shape, out, self._next_offset)
        if self._next_offset is not None:
            self._next_offset += sum(len(p["token"]) for p in out)
        return built


def _redacted(route_kind: str, held: _Held, redactions: list[Finding], style: str) -> Position:
    """The position as it may go out: untouched, or its token redacted and its alternatives dropped."""
    position, start, end = held.position, held.start, held.end
    touching = sorted((r for r in redactions if r.start < max(end, start + 1) and r.end > start), key=lambda r: r.start)
    if not touching:
        return position
    token: str = position["token"]
    if held.aligned and end > start:
        pieces: list[str] = []
        cursor = start
        for r in touching:
            lo, hi = max(r.start, start), min(r.end, end)
            pieces.append(token[cursor - start : lo - start])
            pieces.append(replacement(r if r.start >= start else replace(r, continuation=True), hi - lo, style))
            cursor = hi
        pieces.append(token[cursor - start :])
        new = "".join(pieces)
    elif style == "placeholder":
        heads = [r for r in touching if r.start >= start] if held.lead else []
        new = "".join(replacement(r, 0, style) for r in heads)
    else:
        new = "*" * len(token)
    if route_kind == CHAT:
        bytes_field = {"bytes": list(new.encode())} if position.get("bytes") is not None else {}
        return {**position, "token": new, **bytes_field, "top_logprobs": []}
    return {**position, "token": new, "top": {} if position.get("top") is not None else None}


def _at(values: Any, index: int, count: int) -> Any:
    return values[index] if isinstance(values, list) and len(values) == count else None
