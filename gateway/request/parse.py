"""Validation of OpenAI request bodies: anything malformed becomes a 400 that names the parameter, never a 500.

Only what the gateway itself relies on is checked (model, prompt/messages/input, max_tokens, n, stream); sampling
parameters pass through to the upstream, which validates them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeGuard

from gateway.errors import ApiError, invalid_request
from sluicegate import strict_json
from sluicegate.responses import ResponsesRequestError, responses_names, to_chat

CHAT = "chat"
COMPLETIONS = "completions"
EMBEDDINGS = "embeddings"
RESPONSES = "responses"
"""/v1/responses: parsed into a chat request (kind CHAT), answered in the Responses API's shape."""
MAX_EMBEDDING_INPUTS = 2048  # OpenAI's limit on inputs per request
MAX_N = 128
MAX_TOKENS = 2**31 - 1
MAX_RESERVATION_TOKENS = 2**48
"""max_tokens x n x prompts above this is a 400: the admission script's arithmetic (Lua doubles, Redis integers)
stays exact below it, and no model generates that much."""
TOKEN_ID_LIMIT = 2**32
"""Token ids are uint32 downstream (routing's block hashes, the engine): anything outside [0, 2**32) is a 400."""
# A `\u` escape of a UTF-16 surrogate (D800-DFFF); JSON allows only a lowercase `u`, hex digits in either case.
JsonObject = dict[str, Any]
"""A decoded JSON object (a request body)."""
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


@dataclass
class ParsedRequest:
    kind: str
    body: JsonObject
    model: str
    stream: bool
    client_wants_usage: bool
    """stream_options.include_usage as the client sent it (the gateway always asks the upstream for usage)."""
    max_tokens: int | None
    completions: int
    """Completions the upstream will generate: n x number of prompts (multiplies the output reservation)."""
    prompts: list[str | list[int]]  # completions and embeddings: list of str or of token-id lists; chat: []
    original_body: JsonObject | None = None
    """The body as parsed, before the input hook; `body is original_body` means it went through unchanged."""
    responses: JsonObject | None = None
    """The client's Responses API body when it came to /v1/responses (`body` is the chat body it asks for)."""


INVALID_JSON = "invalid_json"


def parse_json(raw: bytes) -> JsonObject:
    """The body as a JSON object; every malformed body is a 400 with code `invalid_json`, as the replicas answer it
    (NaN and Infinity included: Python's json reads them, JSON has no such values)."""
    try:
        body = strict_json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid_request(f"The request body is not valid JSON: {exc}", code=INVALID_JSON) from None
    except RecursionError:
        raise invalid_request("The request body is nested too deeply.", code=INVALID_JSON) from None
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.", code=INVALID_JSON)
    # json.loads accepts a lone surrogate escape (`\ud800`), a str that no encoder downstream can write: reject it
    # here. Valid pairs (every emoji a client escapes) also match the search, so the re-encode decides; bodies with
    # no surrogate escape pay only the regex scan (~0.8 us for 2 KB; a `b"\\u" in raw` test measured 2.3 us).
    if _SURROGATE_ESCAPE.search(raw):
        try:
            json.dumps(body, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise invalid_request(
                "The request body contains a lone UTF-16 surrogate escape (\\ud800-\\udfff not "
                "part of a pair); strings must be valid Unicode.",
                code=INVALID_JSON,
            ) from None
    return body


def _int_param(body: JsonObject, name: str, minimum: int, maximum: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum else f">= {minimum}"
        raise invalid_request(f"{name} must be an integer {bound}, got {value!r}.", param=name)
    return value


def _model(body: JsonObject) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid_request("model is required and must be a string.", param="model")
    return model


def _no_transfer_params(body: JsonObject) -> None:
    """kv_transfer_params is the gateway's to set: one from a client would have a decode replica pull blocks from
    wherever it points (another tenant's prompt on a prefill replica, or any host)."""
    if "kv_transfer_params" in body:
        raise invalid_request(
            "kv_transfer_params is set by the gateway (disaggregated prefill and decode), not by clients.",
            param="kv_transfer_params",
        )


def _common(kind: str, body: JsonObject, prompts: list[str | list[int]]) -> ParsedRequest:
    model = _model(body)
    _no_transfer_params(body)
    salt = body.get("cache_salt")
    if salt is not None and not isinstance(salt, str):  # the gateway namespaces it (body.cache_salt): never dropped
        raise invalid_request(f"cache_salt must be a string, got {salt!r}.", param="cache_salt")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise invalid_request(f"stream must be a boolean, got {stream!r}.", param="stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise invalid_request("stream_options must be an object.", param="stream_options")
    wants_usage = bool(options and options.get("include_usage"))
    max_tokens = _int_param(body, "max_completion_tokens", 1, MAX_TOKENS) if kind == CHAT else None
    if max_tokens is None:
        max_tokens = _int_param(body, "max_tokens", 1, MAX_TOKENS)
    n = _int_param(body, "n", 1, MAX_N) or 1
    best_of = _int_param(body, "best_of", 1, MAX_N) or 1
    completions = max(n, best_of) * max(1, len(prompts))
    if max_tokens is not None and max_tokens * completions > MAX_RESERVATION_TOKENS:
        raise invalid_request(
            f"max_tokens x n x prompts = {max_tokens * completions} is more than any model can "
            f"generate (at most {MAX_RESERVATION_TOKENS}).",
            param="max_tokens",
        )
    return ParsedRequest(kind, body, model, stream, wants_usage, max_tokens, completions, prompts, body)


def parse_chat(body: JsonObject) -> ParsedRequest:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid_request("messages must be a non-empty array.", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise invalid_request(f"messages[{i}] must be an object with a string role.", param=f"messages[{i}]")
        if message["role"] == "tool" and not isinstance(message.get("tool_call_id"), str):
            # as OpenAI: a tool's answer names the call it answers (templates render it; parsers pair them)
            param = f"messages[{i}].tool_call_id"
            raise invalid_request(f"Missing required parameter: '{param}'.", param=param)
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise invalid_request(
                f"messages[{i}].content must be a string or an array of parts.", param=f"messages[{i}].content"
            )
        # The gateway renders the chat template (what the guardrails scan, what the router hashes): a malformed call
        # must be named here, not surface as the template's own error (the upstream checks the rest).
        calls = message.get("tool_calls")
        if calls is not None and not (isinstance(calls, list) and all(_is_call(call) for call in calls)):
            raise invalid_request(
                f"messages[{i}].tool_calls must be an array of tool calls, each with a function object.",
                param=f"messages[{i}].tool_calls",
            )
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(tool, dict) for tool in tools)):
        raise invalid_request("tools must be an array of objects.", param="tools")
    return _common(CHAT, body, [])


def _is_call(call: object) -> bool:
    return isinstance(call, dict) and isinstance(call.get("function"), dict)


def parse_responses(body: JsonObject) -> ParsedRequest:
    """A Responses API request as the chat request it maps onto: limits, guardrails and routing see chat."""
    try:
        chat = to_chat(body)
    except ResponsesRequestError as exc:
        raise invalid_request(exc.message, param=exc.param) from None
    try:
        parsed = parse_chat(chat)
    except ApiError as error:  # found on the chat body it maps onto: named as the client's request names it
        error.message, error.param = responses_names(error.message, error.param)
        raise
    # Not the client's bytes: the upstream gets the chat body re-encoded (body.py sends raw bytes only when
    # `body is original_body`). The usage rides in every stream: response.completed reports it.
    parsed.original_body, parsed.responses, parsed.client_wants_usage = None, body, True
    return parsed


def _is_token_ids(value: object) -> TypeGuard[list[int]]:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < TOKEN_ID_LIMIT for t in value)
    )


def parse_completion(body: JsonObject) -> ParsedRequest:
    prompt = body.get("prompt")
    prompts: list[str | list[int]]
    if isinstance(prompt, str) or _is_token_ids(prompt):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) or _is_token_ids(p) for p in prompt):
        prompts = list(prompt)
    else:
        raise invalid_request(
            "prompt must be a string, an array of strings, an array of token ids, or an array "
            f"of token-id arrays (token ids are integers in [0, {TOKEN_ID_LIMIT})).",
            param="prompt",
        )
    return _common(COMPLETIONS, body, prompts)


def parse_embeddings(body: JsonObject) -> ParsedRequest:
    """An embeddings request generates nothing: its reservation is its input tokens alone (max_tokens 0)."""
    model = _model(body)
    _no_transfer_params(body)
    raw = body.get("input")
    inputs: list[str | list[int]]
    if (isinstance(raw, str) and raw) or _is_token_ids(raw):
        inputs = [raw]
    elif (
        isinstance(raw, list)
        and 0 < len(raw) <= MAX_EMBEDDING_INPUTS
        and all((isinstance(i, str) and i) or _is_token_ids(i) for i in raw)
    ):
        inputs = list(raw)
    else:
        raise invalid_request(
            "input must be a non-empty string, an array of them, an array of token ids, or an array of token-id "
            f"arrays (at most {MAX_EMBEDDING_INPUTS} inputs; token ids are integers in [0, {TOKEN_ID_LIMIT})).",
            param="input",
        )
    return ParsedRequest(EMBEDDINGS, body, model, False, False, 0, len(inputs), inputs, body)
