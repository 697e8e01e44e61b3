"""Structured outputs over HTTP: the official openai client against a real replica on loopback, then through a
real gateway in front of it (which passes the fields through and counts tokens as before)."""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import openai
import pytest

from tests.gateway.conftest import Admin, gateway_config, serve_gateway, wait_until

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 10},
        "population": {"type": "integer", "minimum": 0, "maximum": 10**7},
        "capital": {"type": "boolean"},
    },
    "required": ["city", "population", "capital"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}}
BAD_SCHEMA = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
MESSAGES = [{"role": "user", "content": "Describe a city."}]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chat_json_schema_validates(client, model, seed):
    completion = client.chat.completions.create(
        model=model, messages=MESSAGES, response_format=RESPONSE_FORMAT, seed=seed, max_tokens=300
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content), SCHEMA)


def test_chat_json_object_streamed(client, model):
    stream = client.chat.completions.create(
        model=model, messages=MESSAGES, response_format={"type": "json_object"}, seed=4, max_tokens=400, stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert isinstance(json.loads(text), dict)


def test_completions_guided_choice_and_regex(client, model):
    choices = ["alpha", "beta", "gamma"]
    out = client.completions.create(
        model=model, prompt="Pick:", max_tokens=50, n=3, seed=1, extra_body={"guided_choice": choices}
    )
    assert all(c.text in choices and c.finish_reason == "stop" for c in out.choices)
    regex = r"\d{3}-\d{4}"
    out = client.completions.create(model=model, prompt="Phone:", max_tokens=50, extra_body={"guided_regex": regex})
    assert re.fullmatch(regex, out.choices[0].text)


def test_completions_guided_json_as_a_string(client, model):
    out = client.completions.create(
        model=model, prompt="JSON:", max_tokens=300, seed=2, extra_body={"guided_json": json.dumps(SCHEMA)}
    )
    jsonschema.validate(json.loads(out.choices[0].text), SCHEMA)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": BAD_SCHEMA}}},
         "response_format.json_schema"),
        ({"guided_regex": "(unclosed"}, "guided_regex"),
        ({"guided_json": "{not json"}, "guided_json"),
        ({"guided_choice": []}, "guided_choice"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        ({"response_format": {"type": "yaml"}}, "response_format.type"),
        ({"response_format": {"type": "json_object"}, "guided_regex": "a+"}, "guided_regex"),
        ({"guided_regex": "a+", "min_tokens": 2}, "min_tokens"),
    ],
)  # fmt: skip
def test_bad_structured_requests_are_400s_and_the_replica_lives(live_server, model, body, param):
    for path, base in (("/v1/chat/completions", {"messages": MESSAGES}), ("/v1/completions", {"prompt": "x"})):
        response = live_server.http.post(path, json={"model": model, "max_tokens": 5, **base, **body})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == param, error
        assert not re.search(r"\.(cc|h):\d+", error["message"]), error  # not xgrammar's C++ source (user trial)
    assert live_server.http.get("/health").status_code == 200
    again = live_server.http.post("/v1/completions", json={"model": model, "prompt": "x", "max_tokens": 2})
    assert again.status_code == 200


def test_bad_schema_through_the_openai_client(client, model):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=model,
            messages=MESSAGES,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": BAD_SCHEMA}},
        )
    assert info.value.status_code == 400


def test_logprobs_under_a_grammar_are_finite_json(client, model):
    completion = client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        extra_body={"guided_choice": ["yes", "no"]},
        logprobs=True,
        top_logprobs=5,
        max_tokens=10,
    )
    choice = completion.choices[0]
    assert choice.message.content in ("yes", "no")
    assert all(entry.logprob <= 0 for entry in choice.logprobs.content)


def test_text_response_format_is_unconstrained(client, model):
    plain = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=8, temperature=0)
    text = client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=8, temperature=0, response_format={"type": "text"}
    )
    assert text.choices[0].message.content == plain.choices[0].message.content


@pytest.fixture(scope="module")
def gateway_client(live_server, model, tiny_model_dir):
    config = gateway_config([live_server.url], tiny_model_dir)
    config["models"]["tiny"]["upstream_model"] = model
    with serve_gateway(config) as gw:
        admin = Admin(gw.url)
        tenant = admin.tenant(rpm=600, input_tpm=100_000, output_tpm=100_000)
        with openai.OpenAI(base_url=gw.url + "/v1", api_key=admin.key(tenant), max_retries=0, timeout=120) as c:
            yield c, admin, tenant


def test_through_the_gateway_fields_pass_and_tokens_are_counted(gateway_client):
    client, admin, tenant = gateway_client
    raw = client.chat.completions.with_raw_response.create(
        model="tiny", messages=MESSAGES, response_format=RESPONSE_FORMAT, seed=3, max_tokens=300
    )
    completion = raw.parse()
    jsonschema.validate(json.loads(completion.choices[0].message.content), SCHEMA)
    assert 100_000 - int(raw.headers["x-ratelimit-remaining-input-tokens"]) == completion.usage.prompt_tokens
    day = wait_until(lambda: (u := admin.usage(tenant))["requests"] == 1 and u)
    assert day["input_tokens"] == completion.usage.prompt_tokens
    assert day["output_tokens"] == completion.usage.completion_tokens

    out = client.completions.create(model="tiny", prompt="Pick:", max_tokens=20, extra_body={"guided_choice": ["on"]})
    assert out.choices[0].text == "on"
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="tiny", prompt="x", max_tokens=5, extra_body={"guided_regex": "(unclosed"})
    assert info.value.status_code == 400 and "regex" in info.value.body["message"]


def test_server_error_body_is_openai_shaped(live_server, model):
    response = httpx.post(
        live_server.url + "/v1/chat/completions",
        json={"model": model, "messages": MESSAGES, "guided_json": BAD_SCHEMA},
        timeout=60,
    )
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
