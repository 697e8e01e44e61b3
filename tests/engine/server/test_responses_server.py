"""/v1/responses with the official openai client, on a real replica and through a real gateway in front of it (the
tiny random-weight model, `--tool-call-parser hermes`, a chat template that renders tools): the answer equals the chat
path's for the same request, streamed events assemble to the whole response, structured output parses, forced tool
calls validate, a call's output round-trips, and the gateway counts the tenant's tokens exactly."""

from __future__ import annotations

import enum
import json

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from tests.engine.server.live import LiveServer, make_engine
from tests.engine.server.test_tool_calls_server import TIME_PARAMETERS, WEATHER_PARAMETERS
from tests.gateway.conftest import Admin, gateway_config, serve_gateway, wait_until

TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Forecast", "parameters": WEATHER_PARAMETERS},
    {"type": "function", "name": "get_time", "parameters": TIME_PARAMETERS},
]
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Forecast", "parameters": WEATHER_PARAMETERS}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME_PARAMETERS}},
]  # fmt: skip
SCHEMAS = {"get_weather": WEATHER_PARAMETERS, "get_time": TIME_PARAMETERS}


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


class Pet(BaseModel):
    name: str = Field(max_length=10)
    colour: Colour
    age: int = Field(ge=0, le=30)
    tags: list[str] = Field(max_length=2)
    owner: str | None = Field(max_length=8)


@pytest.fixture(scope="module")
def live_server(tools_model_dir) -> LiveServer:
    server = LiveServer(make_engine(tools_model_dir), tool_call_parser="hermes").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(live_server, model, tools_model_dir):
    config = gateway_config([live_server.url], tools_model_dir)
    config["models"]["tiny"]["upstream_model"] = model
    with serve_gateway(config) as gw:
        admin = Admin(gw.url)
        tenant = admin.tenant(rpm=6000, input_tpm=1_000_000, output_tpm=1_000_000)
        with openai.OpenAI(base_url=gw.url + "/v1", api_key=admin.key(tenant), max_retries=0, timeout=120) as c:
            yield c, admin, tenant


@pytest.fixture(params=["replica", "gateway"])
def api(request, client, model) -> tuple[openai.OpenAI, str]:
    """The official client on the replica itself, or on the gateway in front of it (model name `tiny`)."""
    if request.param == "replica":
        return client, model
    return request.getfixturevalue("gateway")[0], "tiny"


def test_text_equals_the_chat_answer(api, client, model):
    responses, name = api
    answer = responses.responses.create(
        model=name, instructions="Be brief.", input="Hello there", max_output_tokens=12, temperature=0
    )
    chat = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}],
        max_tokens=12,
        temperature=0,
    )
    assert answer.id.startswith("resp_") and answer.object == "response"
    assert answer.output_text == chat.choices[0].message.content
    assert answer.usage.input_tokens == chat.usage.prompt_tokens
    assert answer.usage.output_tokens == chat.usage.completion_tokens
    assert answer.usage.total_tokens == answer.usage.input_tokens + answer.usage.output_tokens
    finished = chat.choices[0].finish_reason
    assert answer.status == ("incomplete" if finished == "length" else "completed")
    if finished == "length":
        assert answer.incomplete_details.reason == "max_output_tokens"
    assert answer.instructions == "Be brief." and answer.max_output_tokens == 12


def test_streamed_events_assemble_to_the_whole_response(api):
    responses, name = api
    kwargs = dict(model=name, input=[{"role": "user", "content": "Tell me"}], max_output_tokens=16, temperature=0)
    whole = responses.responses.create(**kwargs)
    events = list(responses.responses.create(**kwargs, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert kinds[-1] == ("response.incomplete" if whole.status == "incomplete" else "response.completed")
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text == events[-1].response.output_text
    assert events[-1].response.usage.output_tokens == whole.usage.output_tokens
    assert len({e.response.id for e in events if hasattr(e, "response")}) == 1


@pytest.mark.parametrize("seed", range(4))
def test_parse_returns_the_pydantic_object(api, seed):
    responses, name = api
    parsed = responses.responses.parse(
        model=name, input="A pet, please.", text_format=Pet, max_output_tokens=200, extra_body={"seed": seed}
    )
    assert parsed.status == "completed" and isinstance(parsed.output_parsed, Pet)
    with responses.responses.stream(
        model=name, input="A pet, please.", text_format=Pet, max_output_tokens=200, extra_body={"seed": seed}
    ) as stream:
        final = stream.get_final_response()
    assert final.output_parsed == parsed.output_parsed


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "name": "get_time"}])
def test_forced_calls_validate_streamed_and_whole(api, tool_choice):
    responses, name = api
    kwargs = dict(model=name, input="What time is it?", tools=TOOLS, tool_choice=tool_choice, max_output_tokens=300)
    for seed in range(3):
        answer = responses.responses.create(**kwargs, extra_body={"seed": seed})
        (call,) = answer.output
        assert call.type == "function_call" and call.call_id.startswith("call_") and call.status == "completed"
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
        if isinstance(tool_choice, dict):
            assert call.name == "get_time"
        events = list(responses.responses.create(**kwargs, extra_body={"seed": seed}, stream=True))
        arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert arguments == done.arguments == call.arguments and done.name == call.name
        assert events[-1].type == "response.completed" and events[-1].response.output[0].arguments == arguments


def test_a_call_and_its_output_round_trip_as_the_chat_history(api, client, model):
    responses, name = api
    call = {"type": "function_call", "call_id": "call_1", "name": "get_time", "arguments": '{"zone": "UTC"}'}
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "What time is it?"}]},
        call,
        {"type": "function_call_output", "call_id": "call_1", "output": "12:00"},
    ]
    answer = responses.responses.create(model=name, input=items, tools=TOOLS, max_output_tokens=4, temperature=0)
    history = [
        {"role": "user", "content": "What time is it?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
    ]
    chat = client.chat.completions.create(model=model, messages=history, tools=CHAT_TOOLS, max_tokens=4, temperature=0)
    assert answer.usage.input_tokens == chat.usage.prompt_tokens
    assert answer.output_text == (chat.choices[0].message.content or "")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"background": True}, "background"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"input": []}, "input"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
        ({"input": ""}, "input"),
        ({"metadata": "x"}, "metadata"),
        # found on the chat request it maps onto, named as the client sent it
        ({"max_output_tokens": 2**40}, "max_output_tokens"),
        ({"max_output_tokens": 100_000}, {"input", "max_output_tokens"}),  # the gateway names the prompt, the replica the cap
        ({"text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "nope"}}}}, "text.format"),
        ({"tools": [{"type": "function", "parameters": {}}]}, "tools[0].name"),  # flat, not chat's tools[0].function
    ],
)  # fmt: skip
def test_what_cannot_be_served_is_a_400_naming_the_field(api, body, param):
    responses, name = api
    with pytest.raises(openai.BadRequestError) as refused:
        responses.responses.create(**{"model": name, "input": "hi", **body})
    assert refused.value.body["param"] in ({param} if isinstance(param, str) else param), refused.value.body
    assert "max_tokens" not in refused.value.body["message"] and "response_format" not in refused.value.body["message"]


def test_a_chat_field_sent_to_responses_is_named_as_sent(api):
    """`max_tokens` is not a Responses field: the refusal names it, not the max_output_tokens it would map to."""
    responses, name = api
    with pytest.raises(openai.BadRequestError) as refused:
        responses.responses.create(model=name, input="hi", extra_body={"max_tokens": 5})
    assert refused.value.body["param"] == "max_tokens" and "max_tokens" in refused.value.body["message"]


def test_fields_clients_send_are_accepted_and_ignored(api):
    responses, name = api
    answer = responses.responses.create(
        model=name, input="hi", max_output_tokens=2, store=False, metadata={"app": "test"}, include=[],
        truncation="disabled", service_tier="auto", user="u-1", reasoning={"effort": "low"},
    )  # fmt: skip
    assert answer.metadata == {"app": "test"} and answer.output_text


def test_the_gateway_counts_the_tenants_tokens_exactly(gateway):
    responses, admin, tenant = gateway
    before = admin.usage(tenant)
    answer = responses.responses.create(model="tiny", input="Count me", tools=TOOLS, max_output_tokens=5)
    streamed = list(responses.responses.create(model="tiny", input="Count me too", max_output_tokens=5, stream=True))
    usage = streamed[-1].response.usage
    day = wait_until(lambda: (u := admin.usage(tenant))["requests"] == before["requests"] + 2 and u)
    assert day["input_tokens"] - before["input_tokens"] == answer.usage.input_tokens + usage.input_tokens
    assert day["output_tokens"] - before["output_tokens"] == answer.usage.output_tokens + usage.output_tokens


def test_a_get_is_a_405_in_openais_shape(gateway, live_server):
    responses, _, _ = gateway
    for base in (str(responses.base_url).rstrip("/"), live_server.url + "/v1"):
        reply = httpx.get(base + "/responses", headers={"authorization": f"Bearer {responses.api_key}"})
        assert reply.status_code == 405 and reply.json()["error"]["message"], reply.text
