"""Request parsing for the OpenAI endpoints: JSON body -> a typed request, or an InvalidRequestError that names the
parameter. The body schemas (what each field may be) are request_bodies.py; here are the rules across fields and the
engine's view of a request. Nothing here touches the engine or the tokenizer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

from engine.errors import RequestError
from engine.kv_transfer import params as kv_transfer_params
from engine.kv_transfer.params import KVTransferRequest
from engine.sampling_params import SamplingParams
from engine.server.errors import InvalidRequestError
from engine.server.request_bodies import (
    MAX_PROMPTS,
    ChatBody,
    CompletionBody,
    DetokenizeBody,
    EmbeddingBody,
    GenerateBody,
    Message,
    TokenizeBody,
    validate,
)
from engine.structured.spec import GrammarSpec
from engine.tools.parsers import FirstCallOnly, ToolParser
from engine.tools.plan import ToolPlan, tool_plan
from sluicegate import strict_json

# /v1/completions without max_tokens generates this many, as OpenAI and vLLM do; chat runs up to the context.
COMPLETION_DEFAULT_MAX_TOKENS = 16


@dataclass
class GenerateRequest:
    """One /v1/completions or /v1/chat/completions request, validated."""

    model: str | None
    params: SamplingParams
    stream: bool
    include_usage: bool
    cache_salt: str
    prompts: list[str | list[int]] | None = None  # completions: text or token ids, one engine request each
    messages: list[dict] | None = None  # chat: [{"role", "content": str, ...}], as the chat template takes them
    tools: ToolPlan | None = None  # chat with tools: what the template renders and the output may hold
    tool_parser: ToolParser | None = None  # set when the output is parsed for calls (tool_choice other than none)
    kv_transfer: KVTransferRequest | None = None  # disaggregated serving: a prefill to hand off, or a decode to pull


@dataclass
class EmbeddingRequest:
    """One /v1/embeddings request, validated: each input is text or token ids, one engine request each."""

    model: str | None
    inputs: list[str | list[int]]
    encoding_format: str  # "float" or "base64" (little-endian float32, as OpenAI's)
    dimensions: int | None
    cache_salt: str


@dataclass
class TokenizeRequest:
    model: str | None
    prompt: str | None
    messages: list[dict] | None
    add_special_tokens: bool
    add_generation_prompt: bool


# -- parsing --------------------------------------------------------------------------------------------------------


def parse_json(body: bytes) -> dict:
    """The body as a JSON object; invalid UTF-8, bad JSON, NaN/Infinity, absurd nesting all answer 400."""
    try:
        data = strict_json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequestError(f"The request body is not valid JSON: {_short(exc)}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise InvalidRequestError("The request body must be a JSON object.", code="invalid_json")
    return data


def parse_completion(body: dict) -> GenerateRequest:
    parsed = validate(CompletionBody, _present(body))
    max_tokens = parsed.get("max_tokens", COMPLETION_DEFAULT_MAX_TOKENS)
    request = _generate_request(parsed, parsed.get("logprobs"), max_tokens, "max_tokens")
    if parsed.get("best_of", request.params.n) != request.params.n:  # best_of == n returns every sample: that is n
        raise InvalidRequestError(
            f"best_of must equal n ({request.params.n}): returning the best of more samples "
            "than are returned is not supported.",
            param="best_of",
        )
    request.prompts = _prompt_list(parsed["prompt"])
    return request


def parse_chat(body: dict, tool_parser: ToolParser | None = None) -> GenerateRequest:
    """`tool_parser`: the replica's --tool-call-parser (None: tools may only be rendered, with tool_choice none)."""
    parsed = validate(ChatBody, _present(body))
    want_logprobs = parsed.get("logprobs", False)
    if "top_logprobs" in parsed and not want_logprobs:
        raise InvalidRequestError("top_logprobs requires logprobs to be true.", param="top_logprobs")
    logprobs = parsed.get("top_logprobs", 0) if want_logprobs else None
    # max_completion_tokens (OpenAI's current name) wins when both are given; a bad max_tokens was still a 400.
    if "max_completion_tokens" in parsed:
        request = _generate_request(parsed, logprobs, parsed["max_completion_tokens"], "max_completion_tokens")
    else:
        request = _generate_request(parsed, logprobs, parsed.get("max_tokens"), "max_tokens")
    request.messages = _message_dicts(parsed["messages"])
    request.tools = _tool_plan(parsed, request.params, tool_parser)
    if tool_parser is not None and request.tools is not None and request.tools.parses:
        parallel = parsed.get("parallel_tool_calls") is not False  # absent or null: OpenAI's default, true
        request.tool_parser = tool_parser if parallel else FirstCallOnly(tool_parser)
    return request


def parse_embeddings(body: dict) -> EmbeddingRequest:
    parsed = validate(EmbeddingBody, _present(body))
    raw = parsed["input"]
    # One input (a string or one token-id array) or a batch of them: a list of ints is one input, not a batch.
    single = isinstance(raw, str) or (bool(raw) and isinstance(raw[0], int))
    inputs = [raw] if single else list(raw)
    return EmbeddingRequest(
        model=parsed.get("model"),
        inputs=inputs,  # type: ignore[arg-type]  # validated: str | list[int] each
        encoding_format=parsed.get("encoding_format", "float"),
        dimensions=parsed.get("dimensions"),
        cache_salt=parsed.get("cache_salt", ""),
    )


def parse_tokenize(body: dict) -> TokenizeRequest:
    parsed = validate(TokenizeBody, _present(body))
    prompt, messages = parsed.get("prompt"), parsed.get("messages")
    if (prompt is None) == (messages is None):
        raise InvalidRequestError("Give exactly one of 'prompt' or 'messages'.", param="prompt")
    return TokenizeRequest(
        model=parsed.get("model"),
        prompt=prompt,
        messages=None if messages is None else _message_dicts(messages),
        add_special_tokens=parsed.get("add_special_tokens", True),
        add_generation_prompt=parsed.get("add_generation_prompt", True),
    )


def parse_detokenize(body: dict, vocab_size: int) -> list[int]:
    return token_ids(validate(DetokenizeBody, _present(body))["tokens"], "tokens", vocab_size, allow_empty=True)


def token_ids(value: list[int], param: str, vocab_size: int, allow_empty: bool = False) -> list[int]:
    """Range-check validated ids against the tokenizer's vocabulary (known only to the server, not to the schema)."""
    if not value and not allow_empty:
        raise InvalidRequestError(f"'{param}' must not be empty.", param=param)
    bad = [t for t in value if not 0 <= t < vocab_size]
    if bad:
        raise InvalidRequestError(
            f"Token id {bad[0]} in '{param}' is outside the vocabulary [0, {vocab_size}).", param=param
        )
    return value


# -- internals ------------------------------------------------------------------------------------------------------


def _prompt_list(prompt: str | list) -> list[str | list[int]]:
    """One prompt (text or ids) or a batch of them, as the batch."""
    prompts = [prompt] if isinstance(prompt, str) or isinstance(prompt[0], int) else prompt
    if len(prompts) > MAX_PROMPTS:
        raise InvalidRequestError(f"At most {MAX_PROMPTS} prompts per request.", param="prompt")
    return prompts


def _generate_request(
    body: GenerateBody, logprobs: int | None, max_tokens: int | None, max_tokens_field: str
) -> GenerateRequest:
    stream = body.get("stream", False)
    if "stream_options" in body and not stream:
        raise InvalidRequestError("stream_options is only allowed when stream is true.", param="stream_options")
    try:
        kv_transfer = kv_transfer_params.parse(body.get("kv_transfer_params"))
    except RequestError as exc:
        raise InvalidRequestError(str(exc), param=exc.param) from None
    if kv_transfer is not None and kv_transfer.remote_decode and stream:
        # The response's kv_transfer_params ride on the whole body, as vLLM's do.
        raise InvalidRequestError("kv_transfer_params.do_remote_decode needs stream false.", param="stream")
    return GenerateRequest(
        model=body.get("model"),
        params=_sampling_params(body, logprobs, max_tokens, max_tokens_field),
        stream=stream,
        include_usage="stream_options" in body and bool(body["stream_options"].get("include_usage")),
        cache_salt=body.get("cache_salt", ""),
        kv_transfer=kv_transfer,
    )


def _sampling_params(
    body: GenerateBody, logprobs: int | None, max_tokens: int | None, max_tokens_field: str
) -> SamplingParams:
    """`max_tokens` None means up to the context length; `max_tokens_field` is the name the client used."""
    # The body held no nulls (_present): a default applies to absent and null alike.
    try:
        return SamplingParams(
            n=body.get("n", 1),
            temperature=float(body.get("temperature", 1.0)),
            top_p=float(body.get("top_p", 1.0)),
            top_k=body.get("top_k", 0),
            min_p=float(body.get("min_p", 0.0)),
            seed=body.get("seed"),
            max_tokens=max_tokens,
            min_tokens=body.get("min_tokens", 0),
            stop=body.get("stop", []),
            stop_token_ids=body.get("stop_token_ids", []),
            ignore_eos=body.get("ignore_eos", False),
            logprobs=logprobs,
            presence_penalty=float(body.get("presence_penalty", 0.0)),
            frequency_penalty=float(body.get("frequency_penalty", 0.0)),
            logit_bias={int(token): float(bias) for token, bias in body.get("logit_bias", {}).items()},
            structured=_grammar_spec(body),
        )
    except RequestError as exc:
        param = max_tokens_field if exc.param == "max_tokens" else exc.param
        raise InvalidRequestError(str(exc), param=param) from None


def _tool_plan(body: ChatBody, params: SamplingParams, parser: ToolParser | None) -> ToolPlan | None:
    """The request's tools; a forced call becomes the params' grammar, and parsing keeps the marker's special token."""
    try:
        # The validated TypedDicts are plain dicts: the template takes the tools as the client sent them.
        plan = tool_plan(cast(Any, body.get("tools")), cast(Any, body.get("tool_choice")))
    except RequestError as exc:
        raise InvalidRequestError(str(exc), param=exc.param) from None
    if plan is None or not plan.parses:
        return plan
    if parser is None:
        raise InvalidRequestError(
            f"tool_choice {plan.choice.value!r} needs a replica started with --tool-call-parser; "
            "this one can only render tools (tool_choice 'none').",
            param="tool_choice",
        )
    grammar = plan.grammar(parser)
    if grammar is not None:
        if params.structured is not None:
            raise InvalidRequestError(
                f"tool_choice {plan.choice.value!r} forces a call; it cannot be combined with {params.structured.param}.",
                param="tool_choice",
            )
        if params.min_tokens:
            raise InvalidRequestError("min_tokens cannot be combined with a forced tool call.", param="min_tokens")
        params.structured = grammar
    params.skip_special_tokens = parser.skip_special_tokens
    return plan


_GUIDED_FIELDS = ("guided_json", "guided_regex", "guided_choice")


def _grammar_spec(body: GenerateBody) -> GrammarSpec | None:
    """The grammar the output must follow: response_format (other than text) or one of vLLM's guided_* fields."""
    response_format = body.get("response_format")
    wants_format = response_format is not None and response_format["type"] != "text"
    given = (["response_format"] if wants_format else []) + [name for name in _GUIDED_FIELDS if name in body]
    if len(given) > 1:
        raise InvalidRequestError(
            f"Give at most one of response_format, {', '.join(_GUIDED_FIELDS)}; got {' and '.join(given)}.",
            param=given[1],
        )
    if "guided_json" in body:
        return GrammarSpec.json_schema(body["guided_json"], "guided_json")
    if "guided_regex" in body:
        return GrammarSpec.regex(body["guided_regex"])
    if "guided_choice" in body:
        return GrammarSpec.choice(body["guided_choice"])
    if not wants_format:
        return None
    assert response_format is not None  # wants_format
    if response_format["type"] == "json_object":
        return GrammarSpec.json_object()
    if "json_schema" not in response_format:
        raise InvalidRequestError(
            "Missing required parameter: 'response_format.json_schema'.", param="response_format.json_schema"
        )
    schema = response_format["json_schema"].get("schema")
    param = "response_format.json_schema"
    return GrammarSpec.json_object(param) if schema is None else GrammarSpec.json_schema(schema, param)


def _present(body: dict) -> dict:
    """The body without its top-level nulls: OpenAI's clients send `null` for "not given"."""
    if None not in body.values():  # the common case: no copy
        return body
    return {name: value for name, value in body.items() if value is not None}


def _message_dicts(messages: list[Message]) -> list[dict]:
    """The messages as Hugging Face chat templates take them (and as the gateway renders them,
    gateway/request/tokenizer.py): content a string, a call's arguments decoded into an object."""
    return [_template_message(m, i) for i, m in enumerate(messages)]


_ROLE_ONLY_FIELDS = {"tool_calls": "assistant", "tool_call_id": "tool", "refusal": "assistant"}


def _template_message(message: Message, index: int) -> dict:
    for name, role in _ROLE_ONLY_FIELDS.items():
        if message.get(name) is not None and message["role"] != role:
            param = f"messages[{index}].{name}"
            raise InvalidRequestError(f"'{param}' is only allowed in a message with role '{role}'.", param=param)
    if message["role"] == "tool" and message.get("tool_call_id") is None:  # as OpenAI: it names the call answered
        param = f"messages[{index}].tool_call_id"
        raise InvalidRequestError(f"Missing required parameter: '{param}'.", param=param)
    rendered: dict = {**message, "content": _content(message, index)}
    if message.get("tool_calls"):
        rendered["tool_calls"] = [
            {**call, "function": {**call["function"], "arguments": _arguments(call["function"]["arguments"])}}
            for call in message["tool_calls"] or ()
        ]
    return rendered


def _arguments(text: str) -> dict | str:
    """A call's arguments as the object templates write with `tojson` (left as text when they are not one)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def _content(message: Message, index: int) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if content is None:
        if message["role"] == "assistant":  # a turn that only called tools, or refused: the model said its refusal
            return message.get("refusal") or ""
        raise InvalidRequestError(
            f"Missing required parameter: 'messages[{index}].content'.", param=f"messages[{index}].content"
        )
    if message["role"] != "assistant" and any(part["type"] == "refusal" for part in content):
        param = f"messages[{index}].content"
        raise InvalidRequestError("A refusal part is only allowed in a message with role 'assistant'.", param=param)
    # Joined with nothing, as the gateway does (gateway/request/tokenizer.py): both count and hash the same tokens.
    return "".join(part["text"] if part["type"] == "text" else part["refusal"] for part in content)


def _short(exc: Exception) -> str:
    return str(exc)[:200]
