"""Tool calling over HTTP: the official openai client against a real replica per `--tool-call-parser` on loopback
(tiny random-weight model), then through a real gateway that counts the same prompt tokens with tools in the prompt.

The tiny model's chat template is swapped for one that renders `tools` and the history's `tool_calls`, as Llama 3.1's
does, so the tool definitions and a call's decoded arguments really are in the prompt both sides count."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from tests.engine.server.live import LiveServer, make_engine
from tests.gateway.conftest import Admin, gateway_config, serve_gateway, wait_until

WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "metric": {"type": "boolean"},
    },
    "required": ["city", "days", "metric"],
    "additionalProperties": False,
}
TIME_PARAMETERS = {
    "type": "object",
    "properties": {"zone": {"type": "string", "minLength": 1, "maxLength": 8}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Forecast", "parameters": WEATHER_PARAMETERS},
    },
    {"type": "function", "function": {"name": "get_time", "parameters": TIME_PARAMETERS}},
]
SCHEMAS = {"get_weather": WEATHER_PARAMETERS, "get_time": TIME_PARAMETERS}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
# Texts a model in each family writes for a call; forced with guided_regex to test `auto` parsing end to end.
AUTO_TEXTS = {
    "hermes": r'Sure\.<tool_call>\n\{"name": "get_time", "arguments": \{"zone": "UTC"\}\}\n</tool_call>',
    "llama3_json": r'\{"name": "get_time", "parameters": \{"zone": "UTC"\}\}',
    "mistral": r'Sure\.\[TOOL_CALLS\]\[\{"name": "get_time", "arguments": \{"zone": "UTC"\}\}\]',
}
AUTO_CONTENT = {"hermes": "Sure.", "llama3_json": None, "mistral": "Sure."}


@pytest.fixture(scope="module", params=["hermes", "llama3_json", "mistral"])
def live_server(request, tools_model_dir) -> LiveServer:
    """Overrides conftest's: one replica per tool-call parser, on a model whose template renders tools."""
    server = LiveServer(make_engine(tools_model_dir), tool_call_parser=request.param).start()
    server.parser_name = request.param
    yield server
    server.stop()


def _check_call(call, allowed: set[str]) -> None:
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name in allowed
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_named_choice_is_a_valid_call(client, model, seed):
    completion = client.chat.completions.create(
        model=model, messages=MESSAGES, tools=TOOLS, tool_choice=NAMED, seed=seed, max_tokens=300
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None and len(choice.message.tool_calls) == 1
    _check_call(choice.message.tool_calls[0], {"get_weather"})


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_required_choice_is_a_valid_call(client, model, seed):
    completion = client.chat.completions.create(
        model=model, messages=MESSAGES, tools=TOOLS, tool_choice="required", seed=seed, max_tokens=300
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    _check_call(choice.message.tool_calls[0], set(SCHEMAS))


@pytest.mark.parametrize("tool_choice", ["required", NAMED])
def test_streamed_deltas_assemble_to_the_whole_response(client, model, tool_choice):
    kwargs = dict(model=model, messages=MESSAGES, tools=TOOLS, tool_choice=tool_choice, seed=7, max_tokens=300)
    whole = client.chat.completions.create(**kwargs).choices[0]
    chunks = list(client.chat.completions.create(**kwargs, stream=True))
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for delta_call in chunk.choices[0].delta.tool_calls or []:
            if delta_call.id is not None:
                assert delta_call.index not in calls and delta_call.type == "function"
                assert delta_call.function.arguments == ""
                calls[delta_call.index] = {"id": delta_call.id, "name": delta_call.function.name, "arguments": ""}
            else:
                assert delta_call.function.name is None
                calls[delta_call.index]["arguments"] += delta_call.function.arguments
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["tool_calls"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ""
    expected = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls]
    assert [(c["name"], c["arguments"]) for c in calls.values()] == expected


def test_auto_parses_what_the_model_writes(client, model, live_server):
    name = live_server.parser_name
    kwargs = dict(model=model, messages=MESSAGES, tools=TOOLS, max_tokens=200)
    completion = client.chat.completions.create(**kwargs, extra_body={"guided_regex": AUTO_TEXTS[name]})
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == AUTO_CONTENT[name]
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_time" and json.loads(call.function.arguments) == {"zone": "UTC"}
    plain = client.chat.completions.create(**kwargs, extra_body={"guided_regex": "No call here"}).choices[0]
    assert plain.message.content == "No call here" and not plain.message.tool_calls
    assert plain.finish_reason == "stop"


def test_none_renders_the_tools_and_parses_nothing(client, model, live_server):
    text = AUTO_TEXTS[live_server.parser_name]
    kwargs = dict(model=model, messages=MESSAGES, max_tokens=200, extra_body={"guided_regex": text})
    with_tools = client.chat.completions.create(**kwargs, tools=TOOLS, tool_choice="none")
    without = client.chat.completions.create(**kwargs)
    choice = with_tools.choices[0]
    assert not choice.message.tool_calls and choice.finish_reason == "stop"
    assert choice.message.content == without.choices[0].message.content and "get_time" in choice.message.content
    assert with_tools.usage.prompt_tokens > without.usage.prompt_tokens + 50  # the definitions are in the prompt


def _history(client, model) -> list[dict]:
    """A user turn, the assistant's call (as the openai client hands it back) and the tool's answer to it."""
    first = client.chat.completions.create(
        model=model, messages=MESSAGES, tools=TOOLS, tool_choice=NAMED, seed=11, max_tokens=300
    )
    call = first.choices[0].message.tool_calls[0]
    return [
        *MESSAGES,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "sun"}'},
    ]


def test_a_tool_message_round_trips(client, model, tools_model_dir):
    from transformers import AutoTokenizer

    history = _history(client, model)
    second = client.chat.completions.create(model=model, messages=history, tools=TOOLS, max_tokens=5, seed=1)
    assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")
    # Rendered as Hugging Face templates expect: the call's arguments an object (written with tojson), not a string.
    assistant = history[1]
    arguments = json.loads(assistant["tool_calls"][0]["function"]["arguments"])
    decoded_call = {**assistant["tool_calls"][0], "function": {"name": "get_weather", "arguments": arguments}}
    expected = [history[0], {**assistant, "tool_calls": [decoded_call]}, history[2]]
    tokenizer = AutoTokenizer.from_pretrained(tools_model_dir)
    text = tokenizer.apply_chat_template(expected, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert '"parameters": ' + json.dumps(arguments) in text
    assert second.usage.prompt_tokens == len(tokenizer.encode(text, add_special_tokens=False))


@pytest.fixture(scope="module")
def gateway_client(live_server, model, tools_model_dir):
    config = gateway_config([live_server.url], tools_model_dir)
    config["models"]["tiny"]["upstream_model"] = model
    with serve_gateway(config) as gw:
        admin = Admin(gw.url)
        tenant = admin.tenant(rpm=600, input_tpm=100_000, output_tpm=100_000)
        with openai.OpenAI(base_url=gw.url + "/v1", api_key=admin.key(tenant), max_retries=0, timeout=120) as c:
            yield c, admin, tenant


def test_through_the_gateway_prompt_tokens_match_the_engine(gateway_client, client, model):
    gateway, admin, tenant = gateway_client
    history = _history(client, model)  # straight to the replica: the tenant's usage counts the next request only
    raw = gateway.chat.completions.with_raw_response.create(
        model="tiny", messages=history, tools=TOOLS, tool_choice="required", seed=3, max_tokens=300
    )
    completion = raw.parse()
    _check_call(completion.choices[0].message.tool_calls[0], set(SCHEMAS))
    assert 100_000 - int(raw.headers["x-ratelimit-remaining-input-tokens"]) == completion.usage.prompt_tokens
    day = wait_until(lambda: (u := admin.usage(tenant))["requests"] == 1 and u)
    assert day["input_tokens"] == completion.usage.prompt_tokens
    assert day["output_tokens"] == completion.usage.completion_tokens


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
        ({"tools": TOOLS + TOOLS[:1]}, "tools"),
    ],
)  # fmt: skip
def test_bad_tool_requests_are_400s(live_server, model, body, param):
    response = live_server.http.post("/v1/chat/completions", json={"model": model, "messages": MESSAGES, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error


def test_streamed_through_the_gateway(gateway_client):
    gateway, admin, tenant = gateway_client
    before = wait_until(lambda: (u := admin.usage(tenant))["requests"] >= 1 and u)
    chunks = list(
        gateway.chat.completions.create(
            model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice=NAMED, seed=5, max_tokens=300, stream=True,
            stream_options={"include_usage": True},
        )
    )  # fmt: skip
    deltas = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert deltas[0].id.startswith("call_") and deltas[0].function.name == "get_weather"
    arguments = json.loads("".join(d.function.arguments or "" for d in deltas))
    jsonschema.validate(arguments, WEATHER_PARAMETERS)
    usage = chunks[-1].usage
    day = wait_until(lambda: (u := admin.usage(tenant))["requests"] == before["requests"] + 1 and u)
    assert day["input_tokens"] - before["input_tokens"] == usage.prompt_tokens
