"""What a request's output must match, as the server parses it and the engine caches its compiled grammar by.

Free of torch and xgrammar: request parsing builds it. `source` is canonical (JSON re-serialized compactly), so the
same schema sent with different spacing shares one compiled grammar. Key order is kept, not sorted: a JSON schema's
property order is the order the output's keys come in, so two orders are two grammars.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from engine.errors import RequestError

MAX_GRAMMAR_SOURCE_CHARS = 64 * 1024
"""Largest canonical schema, regex or choice list: compilation time grows with it, and it holds a worker thread."""
MAX_CHOICES = 1024
JSON_OBJECT_SCHEMA = '{"type":"object"}'


class GrammarKind(enum.Enum):
    JSON_OBJECT = "json_object"  # any JSON object (response_format {"type": "json_object"})
    JSON_SCHEMA = "json_schema"  # response_format json_schema, or vLLM's guided_json
    REGEX = "regex"  # vLLM's guided_regex
    CHOICE = "choice"  # vLLM's guided_choice: exactly one of the strings
    TOOL_CALLS = "tool_calls"  # a forced tool call: literal prefix, JSON (schema), literal suffix (engine/tools/)


@dataclass(frozen=True)
class GrammarSpec:
    kind: GrammarKind
    source: str  # canonical JSON of the schema or of the choice list, or the regex as given
    param: str = field(default="response_format", compare=False)  # the request field it came from (errors name it)

    @classmethod
    def json_object(cls, param: str = "response_format") -> GrammarSpec:
        return cls(GrammarKind.JSON_OBJECT, JSON_OBJECT_SCHEMA, param)

    @classmethod
    def json_schema(cls, schema: dict[str, Any] | str, param: str) -> GrammarSpec:
        if isinstance(schema, str):  # vLLM takes guided_json as a JSON string too
            try:
                schema = json.loads(schema)
            except ValueError as exc:
                raise RequestError(f"The JSON schema is not valid JSON: {exc}", param=param) from None
        if not isinstance(schema, dict):
            raise RequestError("The JSON schema must be a JSON object.", param=param)
        return cls(GrammarKind.JSON_SCHEMA, _checked_size(_canonical_json(schema), param), param)

    @classmethod
    def regex(cls, pattern: str, param: str = "guided_regex") -> GrammarSpec:
        if not pattern:
            raise RequestError("The regex is empty.", param=param)
        return cls(GrammarKind.REGEX, _checked_size(pattern, param), param)

    @classmethod
    def choice(cls, choices: list[str], param: str = "guided_choice") -> GrammarSpec:
        if not choices or len(choices) > MAX_CHOICES:
            raise RequestError(f"Give between 1 and {MAX_CHOICES} choices.", param=param)
        if not all(choices):
            raise RequestError("A choice is the empty string.", param=param)
        return cls(GrammarKind.CHOICE, _checked_size(_canonical_json(choices), param), param)

    @classmethod
    def tool_calls(cls, prefix: str, schema: dict[str, Any], suffix: str, param: str = "tool_choice") -> GrammarSpec:
        """JSON matching `schema`, between two literals (a tool-call parser's markers, e.g. `<tool_call>`)."""
        source = _canonical_json({"prefix": prefix, "schema": schema, "suffix": suffix})
        return cls(GrammarKind.TOOL_CALLS, _checked_size(source, param), param)

    @property
    def choices(self) -> list[str]:
        assert self.kind is GrammarKind.CHOICE  # only a choice spec holds a list
        return list(json.loads(self.source))


def _canonical_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _checked_size(source: str, param: str) -> str:
    if len(source) > MAX_GRAMMAR_SOURCE_CHARS:
        raise RequestError(
            f"The grammar source is {len(source)} characters; at most {MAX_GRAMMAR_SOURCE_CHARS} are allowed.",
            param=param,
        )
    return source
