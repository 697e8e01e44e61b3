"""Tool-call parsers per model family (`--tool-call-parser`), each finding the calls in generated text.

`extract(text, final)` is called on the whole text so far: while streaming (final=False) it returns the content that
is surely content (a possible start of a call marker is held back) and the calls that are complete; at the end
(final=True) the answer the non-streamed response gives. Calls only ever grow and content only ever extends while
text is appended, so the deltas a stream sends assemble to the final answer. Text that holds no valid call is all
content. `forced` is a grammar of exactly one call in the family's own format, for `tool_choice` required or named.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.structured.spec import GrammarSpec
from engine.tools.calls import ToolCall, call_from_object, held_back
from engine.tools.schema import call_schema

_DECODER = json.JSONDecoder()


@dataclass
class Extraction:
    content: str  # "" when the calls had no text before them
    calls: list[ToolCall] = field(default_factory=list)


class ToolParser(Protocol):
    skip_special_tokens: bool  # False where the call marker is a special token the text must keep

    def extract(self, text: str, final: bool) -> Extraction: ...

    def forced(self, functions: list[dict[str, Any]]) -> GrammarSpec: ...


class MarkedParser:
    """Calls after a marker (`<tool_call>`, `[TOOL_CALLS]`); the text before the first marker is content."""

    marker: str
    skip_special_tokens = True

    def extract(self, text: str, final: bool) -> Extraction:
        start = text.find(self.marker)
        if start < 0:
            return Extraction(text if final else text[: len(text) - held_back(text, self.marker)])
        calls = self._calls(text, start)
        if final and not calls:
            return Extraction(text)
        return Extraction(text[:start], calls)

    def _calls(self, text: str, start: int) -> list[ToolCall]:
        raise NotImplementedError


class HermesParser(MarkedParser):
    """Hermes and Qwen2.5: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, one block per call."""

    marker, end = "<tool_call>", "</tool_call>"

    def _calls(self, text: str, start: int) -> list[ToolCall]:
        calls = []
        while (start := text.find(self.marker, start)) >= 0:
            end = text.find(self.end, start)
            if end < 0:
                break
            try:
                call = call_from_object(json.loads(text[start + len(self.marker) : end]), ("arguments", "parameters"))
            except ValueError:
                call = None  # a malformed block is not a call
            if call is not None:
                calls.append(call)
            start = end + len(self.end)
        return calls

    def forced(self, functions: list[dict[str, Any]]) -> GrammarSpec:
        return GrammarSpec.tool_calls(self.marker + "\n", call_schema(functions, "arguments"), "\n" + self.end)


class MistralParser(MarkedParser):
    """Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`; the marker is a special token, kept."""

    marker = "[TOOL_CALLS]"
    skip_special_tokens = False

    def _calls(self, text: str, start: int) -> list[ToolCall]:
        rest = text[start + len(self.marker) :].lstrip()
        try:
            value, _ = _DECODER.raw_decode(rest)
        except ValueError:
            return []  # not (yet) a whole array
        items = value if isinstance(value, list) else [value]
        return [call for item in items if (call := call_from_object(item, ("arguments", "parameters"))) is not None]

    def forced(self, functions: list[dict[str, Any]]) -> GrammarSpec:
        calls = call_schema(functions, "arguments", at="/items")
        schema = {"type": "array", "items": calls, "minItems": 1, "maxItems": 1}
        return GrammarSpec.tool_calls(self.marker, schema, "")


class Llama3JsonParser:
    """Llama 3.x: the whole reply is `{"name": ..., "parameters": {...}}` (several joined by `;`), possibly after
    `<|python_tag|>` (dropped with the special tokens, or kept: either way the JSON is found)."""

    tag = "<|python_tag|>"
    skip_special_tokens = True

    def extract(self, text: str, final: bool) -> Extraction:
        body = text.lstrip()
        if body.startswith(self.tag):
            body = body[len(self.tag) :].lstrip()
        elif not body.startswith("{"):
            if not final and self.tag.startswith(body):  # nothing yet, or the tag's first characters
                return Extraction("")
            return Extraction(text)
        calls, position = [], 0
        while position < len(body):
            try:
                value, position = _DECODER.raw_decode(body, position)
            except ValueError:
                break
            call = call_from_object(value, ("parameters", "arguments"))
            if call is None:
                break
            calls.append(call)
            while position < len(body) and body[position] in "; \t\r\n":
                position += 1
        if final and not calls:
            return Extraction(text)
        return Extraction("", calls)

    def forced(self, functions: list[dict[str, Any]]) -> GrammarSpec:
        return GrammarSpec.tool_calls("", call_schema(functions, "parameters"), "")


class FirstCallOnly:
    """`parallel_tool_calls: false`: the first call is the reply's only one, as OpenAI returns at most one."""

    def __init__(self, parser: ToolParser):
        self._parser = parser
        self.skip_special_tokens = parser.skip_special_tokens

    def extract(self, text: str, final: bool) -> Extraction:
        found = self._parser.extract(text, final)
        return Extraction(found.content, found.calls[:1])

    def forced(self, functions: list[dict[str, Any]]) -> GrammarSpec:
        return self._parser.forced(functions)


class ToolParserName(enum.Enum):
    LLAMA3_JSON = "llama3_json"
    HERMES = "hermes"
    MISTRAL = "mistral"


def tool_parser(name: str) -> ToolParser:
    parsers: dict[ToolParserName, type[HermesParser | MistralParser | Llama3JsonParser]] = {
        ToolParserName.LLAMA3_JSON: Llama3JsonParser,
        ToolParserName.HERMES: HermesParser,
        ToolParserName.MISTRAL: MistralParser,
    }
    return parsers[ToolParserName(name)]()
