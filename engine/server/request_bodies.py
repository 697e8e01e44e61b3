"""The JSON bodies of the OpenAI endpoints as pydantic schemas, and pydantic's complaints as OpenAI's 400s.

Every field a client may send is in one of four sets: supported (validated and used); accepted only at its default
value (e.g. `echo: false`; any other value is a 400 naming it, never silently ignored); accepted and ignored (`store`,
`metadata`, `service_tier`: OpenAI's SDKs send them and they change no token); or unknown (a 400 naming it, as OpenAI
answers "Unrecognized request argument"). Types are strict, as in JSON: `"5"` is not 5 and `true` is not 1.

The bodies are TypedDicts, not models: validation returns the client's dict with only the keys it sent, which costs
half of building a 40-field model per request. A top-level null means "not given" (OpenAI's clients send them):
protocol.py drops those keys before validation, so the types here are the values' own. Ranges the engine owns
(temperature, top_p...) SamplingParams checks; rules across fields (best_of == n, stream_options needs stream)
protocol.py checks.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, Required, TypeVar

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError, with_config
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from engine.sampling_params import MAX_LOGPROBS
from engine.server.errors import InvalidRequestError
from engine.structured.spec import MAX_CHOICES

MAX_N = 128
MAX_PROMPTS = 256
MAX_TOOLS = 128  # OpenAI's limit on functions per request
MAX_STOP_STRINGS = 64
MAX_STOP_CHARS = 4096  # each stop string; the streamed hold-back is at most this long
MAX_STOP_TOKEN_IDS = 1024  # every generated token is checked against them
MAX_LOGIT_BIAS = 300  # OpenAI's limit on logit_bias entries
SEED_MIN, SEED_MAX = -(1 << 63), (1 << 63) - 1  # choice i samples with seed + i: stay inside torch's range

UNSUPPORTED = "unsupported"  # error type (and OpenAI error code) of a known field at a value this server cannot honour


def _default_only(*defaults: Any) -> AfterValidator:
    def check(value: Any) -> Any:
        # `type is` too: Python has 0 == False and -0.0 == False, so `echo: 0` would pass a plain `==`.
        if value is None or any(type(value) is type(d) and value == d for d in defaults):
            return value
        raise PydanticCustomError(UNSUPPORTED, "not supported by this server")

    return AfterValidator(check)


def _as_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


# Any length constraint makes pydantic-core read the string as UTF-8, so JSON's "\ud800" (a lone surrogate, which no
# tokenizer can take) fails as `string_unicode` inside the validator, with no Python call per string.
Text = Annotated[str, Field(min_length=0)]
TokenIds = Annotated[list[int], Field(min_length=1)]  # range-checked against the vocabulary later (token_ids)
Prompt = Text | Annotated[list[Text], Field(min_length=1)] | TokenIds | Annotated[list[TokenIds], Field(min_length=1)]
StopString = Annotated[Text, Field(max_length=MAX_STOP_CHARS)]
Stop = Annotated[list[StopString], Field(max_length=MAX_STOP_STRINGS), BeforeValidator(_as_list)]
StopTokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=MAX_STOP_TOKEN_IDS)]
Logprobs = Annotated[int, Field(ge=0, le=MAX_LOGPROBS)]
# OpenAI's shape: token ids as JSON object keys (strings of digits), biases in [-100, 100] added to the logits.
LogitBias = Annotated[
    dict[Annotated[str, Field(pattern=r"^[0-9]{1,10}$")], Annotated[float, Field(ge=-100, le=100)]],
    Field(max_length=MAX_LOGIT_BIAS),
]
MaxTokens = Annotated[int, Field(ge=1)]
ChoiceCount = Annotated[int, Field(ge=1, le=MAX_N)]

_STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


@with_config(ConfigDict(strict=True, extra="ignore"))  # other keys of a part (e.g. cache_control) change nothing
class TextPart(TypedDict):
    type: Literal["text"]
    text: Text


@with_config(ConfigDict(strict=True, extra="ignore"))
class RefusalPart(TypedDict):
    """An assistant turn's refusal, as OpenAI returns it and clients replay it in the history."""

    type: Literal["refusal"]
    refusal: Text


ContentPart = Annotated[TextPart | RefusalPart, Field(discriminator="type")]
FunctionName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]  # OpenAI's rule for function names


@with_config(_STRICT)
class FunctionCall(TypedDict):
    name: Text
    arguments: Text  # JSON text, as the model wrote it (the chat template gets it decoded: protocol.py)


@with_config(_STRICT)
class ToolCallParam(TypedDict):
    id: Text
    type: Literal["function"]
    function: FunctionCall


@with_config(_STRICT)
class Message(TypedDict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: NotRequired[Text | Annotated[list[ContentPart], Field(min_length=1)] | None]
    """Absent or null only for an assistant turn that called tools or refused (protocol.py checks)."""
    refusal: NotRequired[Text | None]  # an assistant turn's refusal, replayed from OpenAI's reply
    name: NotRequired[Text | None]
    tool_calls: NotRequired[list[ToolCallParam] | None]  # an assistant turn's calls
    tool_call_id: NotRequired[Text | None]  # a tool turn: the call it answers


@with_config(_STRICT)
class FunctionDefinition(TypedDict, total=False):
    name: Required[FunctionName]
    description: Text
    parameters: dict[str, Any]  # a JSON schema of the arguments object; absent: no arguments
    strict: bool | None  # accepted; forced calls follow the schema exactly either way


@with_config(_STRICT)
class Tool(TypedDict):
    type: Literal["function"]
    function: FunctionDefinition


@with_config(_STRICT)
class NamedFunction(TypedDict):
    name: Text


@with_config(_STRICT)
class NamedToolChoice(TypedDict):
    type: Literal["function"]
    function: NamedFunction


Messages = Annotated[list[Message], Field(min_length=1)]


@with_config(_STRICT)
class StreamOptions(TypedDict, total=False):
    include_usage: bool | None


@with_config(_STRICT)
class JsonSchemaFormat(TypedDict, total=False):
    name: Required[Text]
    schema: dict[str, Any]  # OpenAI's default when absent: any JSON object
    strict: bool | None  # accepted; the output follows the schema exactly either way
    description: Text


@with_config(_STRICT)
class ResponseFormat(TypedDict, total=False):
    type: Required[Literal["text", "json_object", "json_schema"]]
    json_schema: JsonSchemaFormat  # required for type json_schema (protocol.py checks)


@with_config(_STRICT)
class GenerateBody(TypedDict, total=False):
    """Fields both generation endpoints take."""

    model: Text
    n: ChoiceCount
    stop: Stop
    seed: Annotated[int, Field(ge=SEED_MIN, le=SEED_MAX)]
    temperature: float
    top_p: float
    max_tokens: MaxTokens
    presence_penalty: float
    frequency_penalty: float
    stream: bool
    stream_options: StreamOptions
    user: Text
    top_k: Annotated[int, Field(ge=-1)]
    min_p: float
    ignore_eos: bool
    min_tokens: Annotated[int, Field(ge=0)]
    stop_token_ids: StopTokenIds
    cache_salt: Text
    logit_bias: LogitBias
    response_format: ResponseFormat
    guided_json: dict[str, Any] | Text  # vLLM's structured-output fields; at most one of these four per request
    guided_regex: Text
    guided_choice: Annotated[list[Text], Field(min_length=1, max_length=MAX_CHOICES)]
    kv_transfer_params: dict[str, Any]  # disaggregated serving (engine/kv_transfer/params.py checks its fields)
    # Accepted only when absent or at a value that changes nothing.
    echo: Annotated[Any, _default_only(False)]
    suffix: Annotated[Any, _default_only("")]
    functions: Annotated[Any, _default_only([])]
    function_call: Annotated[Any, _default_only("none", "auto")]
    # false: at most one call per reply (a forced call is one call either way).
    parallel_tool_calls: bool | None
    # Accepted and ignored: bookkeeping for OpenAI's platform, nothing that changes the generated tokens.
    store: Any
    metadata: Any
    service_tier: Any


@with_config(_STRICT)
class CompletionBody(GenerateBody, total=False):
    prompt: Required[Prompt]
    logprobs: Logprobs
    best_of: ChoiceCount


@with_config(_STRICT)
class ChatBody(GenerateBody, total=False):
    messages: Required[Messages]
    logprobs: bool
    top_logprobs: Logprobs
    max_completion_tokens: MaxTokens
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)]
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice


MAX_EMBEDDING_INPUTS = 2048  # OpenAI's limit on inputs per /v1/embeddings request
NonEmptyText = Annotated[str, Field(min_length=1)]
EmbeddingInput = (
    NonEmptyText
    | Annotated[list[NonEmptyText], Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS)]
    | TokenIds
    | Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS)]
)


@with_config(_STRICT)
class EmbeddingBody(TypedDict, total=False):
    model: Text
    input: Required[EmbeddingInput]
    encoding_format: Literal["float", "base64"]
    dimensions: Annotated[int, Field(ge=1)]
    user: Text
    cache_salt: Text  # as on generation requests: the gateway's per-tenant prefix-cache isolation


@with_config(_STRICT)
class TokenizeBody(TypedDict, total=False):
    model: Text
    prompt: Text
    messages: Messages
    add_special_tokens: bool
    add_generation_prompt: bool


@with_config(_STRICT)
class DetokenizeBody(TypedDict, total=False):
    model: Text
    tokens: Required[list[int]]


Body = TypeVar("Body", CompletionBody, ChatBody, EmbeddingBody, TokenizeBody, DetokenizeBody)
_ADAPTERS: dict[type, TypeAdapter] = {
    body: TypeAdapter(body) for body in (CompletionBody, ChatBody, EmbeddingBody, TokenizeBody, DetokenizeBody)
}
# A union's failure is one message naming every accepted form (pydantic reports one complaint per member).
_UNION_EXPECTED = {
    "prompt": "Input should be a string, an array of strings, an array of token ids, or an array of token-id arrays, "
              "and not empty",
    "input": "Input should be a non-empty string, an array of them (at most 2048), an array of token ids, or an "
             "array of token-id arrays",
    "content": "Input should be a string or a non-empty array of text parts (only text content is supported; an "
               "assistant turn may hold refusal parts)",
    "tool_choice": "Input should be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": "
                   "<a tool's name>}}",
}  # fmt: skip


def validate(body_type: type[Body], body: dict) -> Body:
    try:
        return _ADAPTERS[body_type].validate_python(body)
    except ValidationError as exc:
        raise invalid_request(exc.errors(include_url=False), body) from None


def invalid_request(errors: list[Any], body: Any) -> InvalidRequestError:
    """pydantic's first complaint as OpenAI's error object: a 400 whose `param` names the field."""
    loc, kind = errors[0]["loc"], errors[0]["type"]
    param = _param(loc, body, kind == "missing")
    if kind == "extra_forbidden":
        if len(loc) == 1:
            return InvalidRequestError(f"Unrecognized request argument supplied: {param}", param=param)
        return InvalidRequestError(f"'{param}' is not supported.", param=param)
    if kind == "missing":
        return InvalidRequestError(f"Missing required parameter: '{param}'.", param=param)
    if kind == UNSUPPORTED:
        return InvalidRequestError(f"'{param}' is not supported by this server.", param=param, code=UNSUPPORTED)
    same_param = [e for e in errors if _param(e["loc"], body, e["type"] == "missing") == param]
    field = param.rsplit(".", 1)[-1]
    if any(e["type"] == "string_unicode" for e in same_param):
        message = "not valid UTF-8 (lone surrogate)"
    elif len(same_param) > 1 and field in _UNION_EXPECTED:
        message = _UNION_EXPECTED[field]
    else:
        message = errors[0]["msg"]
    return InvalidRequestError(f"Invalid value for '{param}': {message}.", param=param)


# Arrays of values and the token map, named whole as OpenAI names them ("stop", not "stop[3]").
_NAMED_WHOLE = frozenset({"stop", "stop_token_ids", "logit_bias"})


def _param(loc: tuple[int | str, ...], body: Any, missing: bool) -> str:
    """The parameter a client wrote, as deep as the request's objects go ("tools[0].function.name"): the keys and
    indexes of `loc` that are the body's own, up to the first that is not, which is pydantic's name for a union's
    member (the error is then about the union's field: "messages[0].content"). `missing`: the last key is the one
    absent."""
    if loc[0] in _NAMED_WHOLE:
        return str(loc[0])
    path, value = "", body
    for i, part in enumerate(loc):
        if isinstance(part, int) and isinstance(value, list) and 0 <= part < len(value):
            path, value = f"{path}[{part}]", value[part]
        elif isinstance(part, str) and isinstance(value, dict) and (part in value or (missing and i == len(loc) - 1)):
            path, value = f"{path}.{part}" if path else part, value.get(part)
        else:
            break
    return path or str(loc[0])
