"""A Responses API request as the chat completions body that asks the same of the model.

    instructions                          -> a system message first
    input: a string                       -> one user message
    input: items                          -> messages: `message` items by role (developer -> system), text parts
                                             joined; `function_call` items -> the assistant's tool_calls (merged into
                                             the assistant message before them); `function_call_output` -> `tool`
    tools (function tools)                -> chat tools ({"type": "function", "function": {...}})
    tool_choice {"type": "function", ...} -> {"type": "function", "function": {"name": ...}}
    text.format json_object / json_schema -> response_format
    max_output_tokens                     -> max_tokens
    stream                                -> stream, with usage (response.completed carries it)

Stateless: what needs a stored response or conversation (previous_response_id, conversation, item references,
background) is refused with the parameter named, as are hosted tools and non-text inputs, which no replica serves.
Fields OpenAI clients send that change nothing here (store, metadata, include, truncation, reasoning, ...) are
accepted and ignored; a field the Responses API does not have is refused, as on the other endpoints, so that a typo or
another API's parameter ("guided_choice") is not silently dropped.
"""

from __future__ import annotations

import re
from typing import Any

JsonObject = dict[str, Any]

_PASSED_THROUGH = ("model", "temperature", "top_p", "parallel_tool_calls", "user", "seed")
"""Fields with the same name and meaning in both APIs (`seed` is an extension, as in vLLM)."""
_STATEFUL = ("previous_response_id", "conversation", "prompt")
_ACCEPTED_IGNORED = (
    "store", "metadata", "include", "truncation", "reasoning", "service_tier", "prompt_cache_key",
    "safety_identifier", "max_tool_calls", "stream_options",
)  # fmt: skip
_KNOWN = frozenset(
    (*_PASSED_THROUGH, *_STATEFUL, *_ACCEPTED_IGNORED, "input", "instructions", "max_output_tokens", "tools",
     "tool_choice", "text", "stream", "background", "top_logprobs")
)  # fmt: skip
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


class ResponsesRequestError(ValueError):
    """A request this endpoint cannot serve: `param` names the field (OpenAI's error object carries it)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


_CHAT_FIELDS = {
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "messages": "input",
    "prompt": "input",
    "response_format": "text.format",
}
"""Chat body fields an error can name -> the Responses field the client set (a path below one does not map)."""
_CHAT_FIELD_WORD = re.compile(r"\b(max_completion_tokens|max_tokens|response_format)\b")
# A chat tool nests its function ("tools[0].function.name"); a Responses tool is flat ("tools[0].name").
_CHAT_TOOL_FUNCTION = re.compile(r"\b(tools\[\d+\])\.function\b")


def responses_names(message: str, param: str | None) -> tuple[str, str | None]:
    """An error found on the chat request (a bad max_tokens, a prompt past the window, a schema that does not
    compile), in the names of the Responses request its client sent."""
    if param is not None:
        root = re.match(r"[A-Za-z_]*", param)
        field = _CHAT_FIELDS.get(root[0] if root else "")
        param = field if field is not None else _CHAT_TOOL_FUNCTION.sub(r"\1", param)
    message = _CHAT_TOOL_FUNCTION.sub(r"\1", message)
    return _CHAT_FIELD_WORD.sub(lambda m: _CHAT_FIELDS[m[1]], message), param


def to_chat(body: JsonObject) -> JsonObject:
    """The chat completions body for a Responses API request body; raises ResponsesRequestError."""
    unknown = next((name for name in body if name not in _KNOWN), None)
    if unknown is not None:
        raise ResponsesRequestError(f"Unrecognized request argument supplied: {unknown}", unknown)
    _refuse_stateful(body)
    metadata = body.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
    ):  # ignored, but echoed in the answer: it must be what the API says it is
        raise ResponsesRequestError("metadata must be an object of string values.", "metadata")
    chat: JsonObject = {key: body[key] for key in _PASSED_THROUGH if body.get(key) is not None}
    chat["messages"] = _messages(body.get("input"), body.get("instructions"))
    max_tokens = body.get("max_output_tokens")
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ResponsesRequestError(
                f"max_output_tokens must be a positive integer, got {max_tokens!r}.", "max_output_tokens"
            )
        chat["max_tokens"] = max_tokens
    if body.get("tools"):
        chat["tools"] = chat_tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    stream = body.get("stream")
    if stream is not None:
        if not isinstance(stream, bool):
            raise ResponsesRequestError(f"stream must be a boolean, got {stream!r}.", "stream")
        if stream:
            chat["stream"] = True
            chat["stream_options"] = {"include_usage": True}
    return chat


def chat_tools(tools: object) -> list[JsonObject]:
    """Function tools in the chat API's shape (a tool already in that shape passes as it is)."""
    if not isinstance(tools, list):
        raise ResponsesRequestError("tools must be an array.", "tools")
    converted = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise ResponsesRequestError(f"Only function tools are served; tools[{i}] is {kind!r}.", f"tools[{i}].type")
        if isinstance(tool.get("function"), dict):
            converted.append(tool)
            continue
        function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
        converted.append({"type": "function", "function": function})
    return converted


def _refuse_stateful(body: JsonObject) -> None:
    for name in _STATEFUL:
        if body.get(name) is not None:
            raise ResponsesRequestError(
                f"{name} needs a stored response; this endpoint is stateless (store: false): send the whole "
                "conversation in input.",
                name,
            )
    if body.get("background"):
        raise ResponsesRequestError("Background responses are not served; leave background unset.", "background")
    if body.get("top_logprobs"):
        raise ResponsesRequestError("top_logprobs is not served on /v1/responses.", "top_logprobs")


def _messages(items: object, instructions: object) -> list[JsonObject]:
    messages: list[JsonObject] = []
    if instructions is not None:
        if not isinstance(instructions, str):
            raise ResponsesRequestError("instructions must be a string.", "instructions")
        messages.append({"role": "system", "content": instructions})
    if isinstance(items, str) and items:
        messages.append({"role": "user", "content": items})
    elif isinstance(items, list) and items:
        for i, item in enumerate(items):
            _add_item(messages, item, f"input[{i}]")
    else:
        raise ResponsesRequestError("input must be a non-empty string or array of items.", "input")
    if not any(m["role"] != "system" for m in messages):
        raise ResponsesRequestError("input holds no user, assistant or tool message.", "input")
    return messages


def _add_item(messages: list[JsonObject], item: object, param: str) -> None:
    if not isinstance(item, dict):
        raise ResponsesRequestError(f"{param} must be an object.", param)
    kind = item.get("type", "message")
    if kind == "message":
        role = _ROLES.get(item.get("role"))  # type: ignore[arg-type]  # any non-str role is simply unknown
        if role is None:
            raise ResponsesRequestError(
                f"{param}.role must be one of user, assistant, system or developer.", f"{param}.role"
            )
        messages.append({"role": role, "content": _text(item.get("content"), f"{param}.content")})
    elif kind == "function_call":
        call = {
            "id": _string(item, "call_id", param),
            "type": "function",
            "function": {"name": _string(item, "name", param), "arguments": _string(item, "arguments", param)},
        }
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant":  # the text, or the calls, the model answered with
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        output = _text(item.get("output"), f"{param}.output")
        messages.append({"role": "tool", "tool_call_id": _string(item, "call_id", param), "content": output})
    elif kind == "reasoning":
        pass  # a reasoning model's summary from an earlier turn: nothing the chat template renders
    else:
        raise ResponsesRequestError(
            f"{param} is a {kind!r} item; message, function_call and function_call_output items are served "
            "(item references need stored responses).",
            f"{param}.type",
        )


def _text(content: object, param: str) -> str:
    """A message's text: a string, or its text parts joined as the replica joins chat parts (with nothing)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ResponsesRequestError(f"{param} must be a string or an array of parts.", param)
    texts = []
    for i, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in _TEXT_PARTS or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else None
            raise ResponsesRequestError(f"Only text parts are served; {param}[{i}] is {kind!r}.", f"{param}[{i}]")
        texts.append(part["text"])
    return "".join(texts)


def _string(item: JsonObject, key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise ResponsesRequestError(f"{param}.{key} must be a string.", f"{param}.{key}")
    return value


def _tool_choice(choice: object) -> object:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = choice.get("name") or (choice.get("function") or {}).get("name")
        if isinstance(name, str) and name:
            return {"type": "function", "function": {"name": name}}
    raise ResponsesRequestError(
        'tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}.', "tool_choice"
    )


def _response_format(text: object) -> JsonObject | None:
    if text is None:
        return None
    if not isinstance(text, dict):
        raise ResponsesRequestError("text must be an object.", "text")
    fmt = text.get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return None
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise ResponsesRequestError("text.format.schema must be a JSON schema object.", "text.format.schema")
        schema = {key: fmt[key] for key in ("name", "description", "schema", "strict") if key in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise ResponsesRequestError('text.format.type must be "text", "json_object" or "json_schema".', "text.format")
