"""Every string of a chat or completion request body that reaches the model or the upstream, as Segments with their
paths into the body (to write redactions back).

Chat, per message in order: `name`, the content (a string, or its `text` and `refusal` parts as one unit, joined
with nothing as the engine joins them), an assistant turn's `refusal`, each tool call's function `name` (an identifier: not redactable) and `arguments` (also
the legacy `function_call`). Then each tool's (and legacy function's) `name`, `description` and every string inside
its `parameters` schema; `response_format`'s JSON schema strings. Completions: each prompt string and `suffix`.
Embeddings: each `input` string (PII only: it is data to embed, not an instruction).
Both: `user` and the `stop` strings. Injection is scored on user/tool/function messages' text and on completion
prompts and suffixes, as before; PII everywhere.

Not scanned: schema property names (dict keys), token-id prompts, images and audio.
"""

from __future__ import annotations

from typing import Any

from guardrails.prompt_view import Segment

CHAT = "chat"
EMBEDDINGS = "embeddings"
UNTRUSTED_ROLES = frozenset({"user", "tool", "function"})
TEXT_PARTS = ("text", "refusal")  # content parts the model reads (an assistant turn may replay its refusal)
Path = tuple[str | int, ...]


class _Collector:
    def __init__(self) -> None:
        self.fields: list[tuple[Segment, Path]] = []
        self.unit = 0

    def add(
        self, value: Any, path: Path, untrusted: bool = False, redactable: bool = True, new_unit: bool = True
    ) -> None:
        if not isinstance(value, str):
            return
        if new_unit:
            self.unit += 1
        self.fields.append((Segment(value, self.unit, untrusted, redactable), path))

    def add_one_or_many(self, value: Any, key: str, untrusted: bool = False) -> None:
        """A field that holds a string or a list of them (`prompt`, `input`, `stop`), each its own unit."""
        if isinstance(value, list):
            for i, item in enumerate(value):
                self.add(item, (key, i), untrusted)
        else:
            self.add(value, (key,), untrusted)

    def add_strings(self, value: Any, path: Path) -> None:
        """Every string value inside a JSON value (a schema), each its own unit; iterative, so nesting depth is
        no recursion limit."""
        stack: list[tuple[Any, Path]] = [(value, path)]
        while stack:
            item, at = stack.pop()
            if isinstance(item, str):
                self.add(item, at)
            elif isinstance(item, dict):
                stack += [(v, (*at, k)) for k, v in reversed(item.items())]
            elif isinstance(item, list):
                stack += [(v, (*at, i)) for i, v in reversed(list(enumerate(item)))]

    def add_function(self, function: Any, path: Path) -> None:
        """A tool definition's or tool call's function: name (identifier), description, parameters, arguments."""
        if not isinstance(function, dict):
            return
        self.add(function.get("name"), (*path, "name"), redactable=False)
        self.add(function.get("description"), (*path, "description"))
        if "parameters" in function:
            self.add_strings(function["parameters"], (*path, "parameters"))
        self.add(function.get("arguments"), (*path, "arguments"))


def request_fields(route_kind: str, body: dict[str, Any]) -> list[tuple[Segment, Path]]:
    fields = _Collector()
    if route_kind == CHAT:
        messages = body.get("messages")
        for i, message in enumerate(messages if isinstance(messages, list) else []):
            if isinstance(message, dict):
                _message(fields, message, ("messages", i))
        for key in ("tools", "functions"):
            items = body.get(key)
            for j, item in enumerate(items if isinstance(items, list) else []):
                if isinstance(item, dict):
                    fields.add_function(
                        item.get("function", item) if key == "tools" else item, _tool_path(key, j, item)
                    )
        response_format = body.get("response_format")
        if isinstance(response_format, dict) and "json_schema" in response_format:
            fields.add_strings(response_format["json_schema"], ("response_format", "json_schema"))
    elif route_kind == EMBEDDINGS:
        # Data to embed, not instructions to a model: PII is redacted, injection is not scored.
        fields.add_one_or_many(body.get("input"), "input")
    else:
        fields.add_one_or_many(body.get("prompt"), "prompt", untrusted=True)
        fields.add(body.get("suffix"), ("suffix",), untrusted=True)
    fields.add(body.get("user"), ("user",))
    fields.add_one_or_many(body.get("stop"), "stop")
    return fields.fields


def _message(fields: _Collector, message: dict[str, Any], path: Path) -> None:
    untrusted = message.get("role") in UNTRUSTED_ROLES
    fields.add(message.get("name"), (*path, "name"), untrusted)
    content = message.get("content")
    if isinstance(content, str):
        fields.add(content, (*path, "content"), untrusted)
    elif isinstance(content, list):
        first = True
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in TEXT_PARTS:  # a part's text is under its type's name
                fields.add(part.get(kind), (*path, "content", j, kind), untrusted, new_unit=first)
                first = first and not isinstance(part.get(kind), str)
    fields.add(message.get("refusal"), (*path, "refusal"), untrusted)  # an assistant turn's, read when content is null
    calls = message.get("tool_calls")
    for j, call in enumerate(calls if isinstance(calls, list) else []):
        if isinstance(call, dict):
            fields.add_function(call.get("function"), (*path, "tool_calls", j, "function"))
    fields.add_function(message.get("function_call"), (*path, "function_call"))


def _tool_path(key: str, index: int, item: dict[str, Any]) -> Path:
    return (key, index, "function") if key == "tools" and "function" in item else (key, index)
