"""Request parsing and validation for the OpenAI endpoints: JSON body -> a typed request, or an InvalidRequestError
that names the parameter. Nothing here touches the engine or the tokenizer.

Every field a client may send is in one of three sets: supported (validated and used), accepted only at its default
value (e.g. `echo: false`; any other value is a 400 naming it, never silently ignored), or unknown (a 400 naming it,
as OpenAI answers "Unrecognized request argument").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from engine.errors import RequestError
from engine.sampling_params import MAX_LOGPROBS, SamplingParams
from engine.server.errors import InvalidRequestError

MAX_N = 128
MAX_PROMPTS = 256
MAX_STOP_STRINGS = 64
MAX_STOP_CHARS = 4096  # each stop string; the streamed hold-back is at most this long
MAX_STOP_TOKEN_IDS = 1024  # every generated token is checked against them
_SEED_MIN, _SEED_MAX = -(1 << 63), (1 << 63) - 1  # choice i samples with seed + i: stay inside torch's range
# /v1/completions without max_tokens generates this many, as OpenAI and vLLM do; chat runs up to the context.
COMPLETION_DEFAULT_MAX_TOKENS = 16

_SAMPLING_FIELDS = {
    "model", "n", "stop", "seed", "temperature", "top_p", "max_tokens", "presence_penalty", "frequency_penalty",
    "stream", "stream_options", "user", "top_k", "min_p", "ignore_eos", "min_tokens", "stop_token_ids", "cache_salt",
}  # fmt: skip
_COMPLETION_FIELDS = _SAMPLING_FIELDS | {"prompt", "logprobs", "best_of"}
_CHAT_FIELDS = _SAMPLING_FIELDS | {"messages", "logprobs", "top_logprobs", "max_completion_tokens"}

# Fields accepted only when absent or at a value that changes nothing.
_DEFAULT_ONLY = {
    "echo": (False,),
    "suffix": ("",),
    "logit_bias": ({},),
    "tools": ([],),
    "tool_choice": ("none", "auto"),
    "functions": ([],),
    "function_call": ("none", "auto"),
    "parallel_tool_calls": (True, False),
    "response_format": ({"type": "text"},),
}
_CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass
class GenerateRequest:
    """One /v1/completions or /v1/chat/completions request, validated."""

    model: str | None
    params: SamplingParams
    stream: bool
    include_usage: bool
    cache_salt: str
    prompts: list[str | list[int]] | None = None  # completions: text or token ids, one engine request each
    messages: list[dict] | None = None  # chat: [{"role", "content": str}]


@dataclass
class TokenizeRequest:
    model: str | None
    prompt: str | None
    messages: list[dict] | None
    add_special_tokens: bool
    add_generation_prompt: bool


def parse_json(body: bytes) -> dict:
    """The body as a JSON object; invalid UTF-8, bad JSON, NaN/Infinity, absurd nesting all answer 400."""
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequestError(f"The request body is not valid JSON: {_short(exc)}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise InvalidRequestError("The request body must be a JSON object.", code="invalid_json")
    return data


def parse_completion(body: dict) -> GenerateRequest:
    _check_fields(body, _COMPLETION_FIELDS)
    if "prompt" not in body:
        raise InvalidRequestError("Missing required parameter: 'prompt'.", param="prompt")
    logprobs = _opt_int(body, "logprobs", 0, MAX_LOGPROBS)
    request = _parse_generate(body, logprobs, "max_tokens", default_max_tokens=COMPLETION_DEFAULT_MAX_TOKENS)
    best_of = _opt_int(body, "best_of", 1, MAX_N)
    if best_of is not None and best_of != request.params.n:  # best_of == n returns every sample: that is n
        raise InvalidRequestError(f"best_of must equal n ({request.params.n}): returning the best of more samples "
                                  "than are returned is not supported.", param="best_of")
    request.prompts = _prompts(body["prompt"])
    return request


def parse_chat(body: dict) -> GenerateRequest:
    _check_fields(body, _CHAT_FIELDS)
    if "messages" not in body:
        raise InvalidRequestError("Missing required parameter: 'messages'.", param="messages")
    want_logprobs = _opt_bool(body, "logprobs", False)
    top_logprobs = _opt_int(body, "top_logprobs", 0, MAX_LOGPROBS)
    if top_logprobs is not None and not want_logprobs:
        raise InvalidRequestError("top_logprobs requires logprobs to be true.", param="top_logprobs")
    logprobs = (top_logprobs or 0) if want_logprobs else None
    # max_completion_tokens (OpenAI's current name) wins when both are given, but a bad max_tokens is still a 400.
    _opt_int(body, "max_tokens", 1, None)
    field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    request = _parse_generate(body, logprobs, field, default_max_tokens=None)
    request.messages = parse_messages(body["messages"])
    return request


def parse_tokenize(body: dict) -> TokenizeRequest:
    _check_fields(body, {"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt"})
    has_prompt, has_messages = body.get("prompt") is not None, body.get("messages") is not None
    if has_prompt == has_messages:
        raise InvalidRequestError("Give exactly one of 'prompt' or 'messages'.", param="prompt")
    return TokenizeRequest(
        model=_opt_str(body, "model"),
        prompt=_text(body["prompt"], "prompt") if has_prompt else None,
        messages=parse_messages(body["messages"]) if has_messages else None,
        add_special_tokens=_opt_bool(body, "add_special_tokens", True),
        add_generation_prompt=_opt_bool(body, "add_generation_prompt", True),
    )


def parse_detokenize(body: dict, vocab_size: int) -> list[int]:
    _check_fields(body, {"model", "tokens"})
    if "tokens" not in body:
        raise InvalidRequestError("Missing required parameter: 'tokens'.", param="tokens")
    return token_ids(body["tokens"], "tokens", vocab_size, allow_empty=True)


def parse_messages(value) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise InvalidRequestError("'messages' must be a non-empty array of message objects.", param="messages")
    return [_message(m, f"messages[{i}]") for i, m in enumerate(value)]


def token_ids(value, param: str, vocab_size: int, allow_empty: bool = False) -> list[int]:
    if not isinstance(value, list) or not all(_is_int(t) for t in value):
        raise InvalidRequestError(f"'{param}' must be an array of integer token ids.", param=param)
    if not value and not allow_empty:
        raise InvalidRequestError(f"'{param}' must not be empty.", param=param)
    bad = [t for t in value if not 0 <= t < vocab_size]
    if bad:
        raise InvalidRequestError(
            f"Token id {bad[0]} in '{param}' is outside the vocabulary [0, {vocab_size}).", param=param
        )
    return value


# -- internals ------------------------------------------------------------------------------------------------------


def _parse_generate(
    body: dict, logprobs: int | None, max_tokens_field: str, default_max_tokens: int | None
) -> GenerateRequest:
    stream = _opt_bool(body, "stream", False)
    stream_options = body.get("stream_options")
    include_usage = False
    if stream_options is not None:
        if not stream:
            raise InvalidRequestError("stream_options is only allowed when stream is true.", param="stream_options")
        if not isinstance(stream_options, dict) or set(stream_options) - {"include_usage"}:
            raise InvalidRequestError("stream_options supports only 'include_usage'.", param="stream_options")
        include_usage = _opt_bool(stream_options, "include_usage", False, param="stream_options.include_usage")
    _opt_str(body, "user")
    params = _sampling_params(body, logprobs, max_tokens_field, default_max_tokens)
    return GenerateRequest(
        model=_opt_str(body, "model"),
        params=params,
        stream=stream,
        include_usage=include_usage,
        cache_salt=_opt_str(body, "cache_salt") or "",
    )


def _sampling_params(
    body: dict, logprobs: int | None, max_tokens_field: str, default_max_tokens: int | None
) -> SamplingParams:
    """`default_max_tokens` applies when the client sends none; None there means up to the context length."""
    n = _opt_int(body, "n", 1, MAX_N)
    max_tokens = _opt_int(body, max_tokens_field, 1, None)
    kwargs = {
        "n": 1 if n is None else n,
        "temperature": _opt_float(body, "temperature", 1.0),
        "top_p": _opt_float(body, "top_p", 1.0),
        "top_k": _opt_int(body, "top_k", -1, None) or 0,
        "min_p": _opt_float(body, "min_p", 0.0),
        "seed": _opt_int(body, "seed", _SEED_MIN, _SEED_MAX),
        "max_tokens": default_max_tokens if max_tokens is None else max_tokens,
        "min_tokens": _opt_int(body, "min_tokens", 0, None) or 0,
        "stop": _stop(body.get("stop")),
        "stop_token_ids": _opt_int_list(body, "stop_token_ids"),
        "ignore_eos": _opt_bool(body, "ignore_eos", False),
        "logprobs": logprobs,
        "presence_penalty": _opt_float(body, "presence_penalty", 0.0),
        "frequency_penalty": _opt_float(body, "frequency_penalty", 0.0),
    }
    try:
        return SamplingParams(**kwargs)
    except RequestError as exc:
        param = max_tokens_field if exc.param == "max_tokens" else exc.param
        raise InvalidRequestError(str(exc), param=param) from None


def _check_fields(body: dict, supported: set[str]) -> None:
    for name, value in body.items():
        if name in supported:
            continue
        if name in _DEFAULT_ONLY:
            if value is None or any(_same_json(value, default) for default in _DEFAULT_ONLY[name]):
                continue
            raise InvalidRequestError(f"'{name}' is not supported by this server.", param=name, code="unsupported")
        raise InvalidRequestError(f"Unrecognized request argument supplied: {name}", param=name)


def _same_json(value, default) -> bool:
    # Python has 0 == False and -0.0 == False, so `echo: 0` would pass a plain `==`. The defaults nest only strings,
    # which `==` already compares strictly.
    return type(value) is type(default) and value == default


def _prompts(value) -> list[str | list[int]]:
    """A string, a list of strings, a list of token ids, or a list of token-id lists. Ids are range-checked later
    (the vocabulary size is the tokenizer's)."""
    if isinstance(value, str):
        return [_text(value, "prompt")]
    if isinstance(value, list) and value:
        if all(isinstance(p, str) for p in value):
            prompts = [_text(p, f"prompt[{i}]") for i, p in enumerate(value)]
        elif all(_is_int(t) for t in value):
            prompts = [value]
        elif all(isinstance(p, list) and p and all(_is_int(t) for t in p) for p in value):
            prompts = list(value)
        else:
            prompts = []
        if prompts:
            if len(prompts) > MAX_PROMPTS:
                raise InvalidRequestError(f"At most {MAX_PROMPTS} prompts per request.", param="prompt")
            return prompts
    raise InvalidRequestError(
        "'prompt' must be a string, an array of strings, an array of token ids, or an array of token-id arrays, "
        "and must not be empty.",
        param="prompt",
    )


def _message(value, param: str) -> dict:
    if not isinstance(value, dict):
        raise InvalidRequestError(f"'{param}' must be an object with 'role' and 'content'.", param=param)
    extra = sorted(set(value) - {"role", "content", "name"})
    if extra:
        raise InvalidRequestError(f"'{param}.{extra[0]}' is not supported.", param=f"{param}.{extra[0]}")
    role = value.get("role")
    if role not in _CHAT_ROLES:
        raise InvalidRequestError(f"'{param}.role' must be one of {', '.join(_CHAT_ROLES)}.", param=f"{param}.role")
    content = value.get("content")
    if content is None and role == "assistant":
        content = ""
    return {"role": role, "content": _content(content, f"{param}.content")}


def _content(value, param: str) -> str:
    if isinstance(value, str):
        return _text(value, param)
    if isinstance(value, list) and value:
        texts = []
        for i, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise InvalidRequestError(f"'{param}[{i}]': only text content parts are supported.", param=param)
            texts.append(_text(part["text"], f"{param}[{i}].text"))
        # Joined with nothing, as the gateway does (gateway/tokenizer.py), so both count and hash the same tokens.
        return "".join(texts)
    raise InvalidRequestError(f"'{param}' must be a string or a non-empty array of text parts.", param=param)


def _text(value, param: str) -> str:
    if not isinstance(value, str):
        raise InvalidRequestError(f"'{param}' must be a string.", param=param)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # JSON "\ud800" parses to a lone surrogate, which no tokenizer can take.
        raise InvalidRequestError(f"'{param}' is not valid UTF-8 (lone surrogate).", param=param) from None
    return value


def _stop(value) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > MAX_STOP_STRINGS:
        raise InvalidRequestError(f"'stop' must be a string or an array of at most {MAX_STOP_STRINGS}.", param="stop")
    stops = [_text(s, "stop") for s in stops]
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        raise InvalidRequestError(f"each 'stop' string must be at most {MAX_STOP_CHARS} characters.", param="stop")
    return stops


def _opt_int(body: dict, name: str, low: int, high: int | None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value):
        raise InvalidRequestError(f"'{name}' must be an integer.", param=name)
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidRequestError(f"'{name}' must be {bound}; got {value}.", param=name)
    return value


def _opt_int_list(body: dict, name: str) -> list[int]:
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_STOP_TOKEN_IDS or not all(_is_int(t) and t >= 0 for t in value):
        raise InvalidRequestError(f"'{name}' must be an array of at most {MAX_STOP_TOKEN_IDS} non-negative integers.",
                                  param=name)
    return value


def _opt_float(body: dict, name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidRequestError(f"'{name}' must be a number.", param=name)
    return float(value)


def _opt_bool(body: dict, name: str, default: bool, param: str | None = None) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidRequestError(f"'{param or name}' must be a boolean.", param=param or name)
    return value


def _opt_str(body: dict, name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    return _text(value, name)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _short(exc: Exception) -> str:
    return str(exc)[:200]
