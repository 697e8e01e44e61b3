"""Parsed calls in OpenAI's response shapes: `message.tool_calls` for a whole response, deltas for a stream.

A stream sends, per call, a first delta with the call's `index`, `id`, `type` and `name` (arguments ""), then the
arguments in fragments under the same `index`, as OpenAI does; content before the calls streams as content.
"""

from __future__ import annotations

from typing import Any

from engine.tools.calls import ToolCall, new_call_id
from engine.tools.parsers import Extraction, ToolParser

ARGUMENT_FRAGMENT_CHARS = 32  # a call's arguments are sent in pieces this long, as a model's tokens would arrive


def finish_reason(reason: str, called: bool) -> str:
    """The reason to report: "tool_calls" when the reply ended on its own with calls in it ("length" stays)."""
    return "tool_calls" if called and reason == "stop" else reason


def message(parser: ToolParser, text: str) -> tuple[dict[str, Any], bool]:
    """The chat message for a whole reply, and whether it holds calls."""
    found = parser.extract(text, final=True)
    if not found.calls:
        return {"role": "assistant", "content": text}, False
    calls = [_call(call) for call in found.calls]
    return {"role": "assistant", "content": found.content or None, "tool_calls": calls}, True


def _call(call: ToolCall) -> dict[str, Any]:
    return {"id": new_call_id(), "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


class ToolDeltas:
    """One choice's stream: text in, delta payloads (`{"content": ...}` or `{"tool_calls": [...]}`) out."""

    def __init__(self, parser: ToolParser):
        self._parser = parser
        self._text = ""
        self._content_sent = 0
        self._calls_sent = 0

    @property
    def called(self) -> bool:
        return self._calls_sent > 0

    def feed(self, text: str) -> list[dict[str, Any]]:
        self._text += text
        return self._new(self._parser.extract(self._text, final=False))

    def finish(self) -> list[dict[str, Any]]:
        return self._new(self._parser.extract(self._text, final=True))

    def _new(self, found: Extraction) -> list[dict[str, Any]]:
        deltas: list[dict[str, Any]] = []
        if len(found.content) > self._content_sent:
            deltas.append({"content": found.content[self._content_sent :]})
            self._content_sent = len(found.content)
        for index, call in enumerate(found.calls[self._calls_sent :], start=self._calls_sent):
            head = {"index": index, "id": new_call_id(), "type": "function"}
            deltas.append({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
            for start in range(0, len(call.arguments), ARGUMENT_FRAGMENT_CHARS):
                fragment = call.arguments[start : start + ARGUMENT_FRAGMENT_CHARS]
                deltas.append({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
        self._calls_sent = max(self._calls_sent, len(found.calls))
        return deltas
