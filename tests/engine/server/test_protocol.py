"""Request parsing and validation (pure logic, no server)."""

from __future__ import annotations

import pytest

from engine.server.errors import InvalidRequestError
from engine.server.protocol import parse_chat, parse_completion, parse_detokenize, parse_json, parse_tokenize


def _error(fn, *args) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        fn(*args)
    return info.value


@pytest.mark.parametrize(
    "body",
    [b"{", b"[1, 2]", b"\xff\xfe{}", b'{"a": NaN}', b'{"a": -Infinity}', b"[" * 100_000 + b"]" * 100_000, b""],
)
def test_bad_json_is_invalid_request(body):
    assert _error(parse_json, body).code == "invalid_json"


def test_completion_defaults_and_vllm_extras():
    request = parse_completion(
        {
            "model": "m", "prompt": "hi", "max_tokens": 7, "n": 2, "stop": "x", "seed": 3, "temperature": 0.5,
            "top_p": 0.9, "top_k": 5, "min_p": 0.1, "ignore_eos": True, "min_tokens": 2, "stop_token_ids": [9],
            "cache_salt": "t1", "presence_penalty": 0.5, "frequency_penalty": -0.5, "logprobs": 2, "user": "u",
            "echo": False, "stream": True, "stream_options": {"include_usage": True},
        }
    )  # fmt: skip
    p = request.params
    assert (p.n, p.max_tokens, p.stop, p.seed, p.top_k, p.min_p, p.logprobs) == (2, 7, ["x"], 3, 5, 0.1, 2)
    assert (p.ignore_eos, p.min_tokens, p.stop_token_ids) == (True, 2, [9])
    assert request.prompts == ["hi"] and request.cache_salt == "t1" and request.include_usage


def test_max_tokens_absent_is_16_for_completions_and_up_to_context_for_chat():
    """OpenAI's and vLLM's defaults: a completion without max_tokens stops after 16 tokens, a chat does not."""
    assert parse_completion({"prompt": "hi"}).params.max_tokens == 16
    assert parse_completion({"prompt": "hi", "max_tokens": None}).params.max_tokens == 16
    assert parse_chat({"messages": [{"role": "user", "content": "x"}]}).params.max_tokens is None


@pytest.mark.parametrize(
    "prompt, expected",
    [("a", ["a"]), (["a", "b"], ["a", "b"]), ([1, 2], [[1, 2]]), ([[1], [2, 3]], [[1], [2, 3]])],
)
def test_prompt_forms(prompt, expected):
    assert parse_completion({"prompt": prompt}).prompts == expected


@pytest.mark.parametrize("prompt", [[], "", None, 3, [[1], "a"], [True, 1], [[]], [1.5], {"a": 1}])
def test_bad_prompts(prompt):
    body = {"prompt": prompt}
    if prompt == "":
        assert parse_completion(body).prompts == [""]  # emptiness is judged after tokenization
        return
    assert _error(parse_completion, body).param in ("prompt", "prompt[0]")


@pytest.mark.parametrize(
    "field, value",
    [
        ("n", True), ("n", 0), ("n", 1000), ("max_tokens", "5"), ("max_tokens", 0), ("max_tokens", 1.5),
        ("temperature", "hot"), ("temperature", -1), ("top_p", 0), ("top_p", 2.0), ("logprobs", 99),
        ("logprobs", True), ("seed", 1 << 63), ("stop", [1]), ("stop", {"a": 1}), ("stop_token_ids", [-1]),
        ("ignore_eos", "yes"), ("presence_penalty", 3), ("min_tokens", -1), ("cache_salt", 5), ("top_k", -2),
        ("stream", 1), ("model", 7), ("temperature", True), ("n", 2.0), ("seed", "1"), ("stop_token_ids", [1.0]),
    ],
)  # fmt: skip
def test_wrong_types_and_ranges_name_the_param(field, value):
    error = _error(parse_completion, {"prompt": "hi", field: value})
    assert error.status_code == 400 and error.param == field, error.message


def test_best_of_equal_to_n_is_n():
    assert parse_completion({"prompt": "hi", "best_of": 1}).params.n == 1
    assert parse_completion({"prompt": "hi", "n": 3, "best_of": 3}).params.n == 3
    assert _error(parse_completion, {"prompt": "hi", "n": 2, "best_of": 3}).param == "best_of"


def test_min_tokens_above_max_tokens():
    assert _error(parse_completion, {"prompt": "hi", "max_tokens": 2, "min_tokens": 5}).param == "min_tokens"


@pytest.mark.parametrize(
    "field, value", [("echo", True), ("suffix", "x"), ("functions", [{"name": "f"}]), ("best_of", 2)]
)
def test_unsupported_parameters_are_named(field, value):
    error = _error(parse_completion, {"prompt": "hi", field: value})
    assert error.param == field and field in error.message


@pytest.mark.parametrize(
    "parse, field, value",
    [
        (parse_completion, "echo", 0), (parse_completion, "echo", -0.0), (parse_completion, "suffix", 0),
    ],
)  # fmt: skip
def test_default_only_values_must_have_the_default_type(parse, field, value):
    """0 == False in Python; in JSON a number is not a boolean."""
    body = {"prompt": "hi", "messages": [{"role": "user", "content": "x"}], field: value}
    body.pop("messages" if parse is parse_completion else "prompt")
    error = _error(parse, body)
    assert error.param == field and error.code == "unsupported"


@pytest.mark.parametrize("value", [0, 1, "x"])
def test_parallel_tool_calls_is_a_boolean(value):
    """Both values are served (false: one call a reply), so anything else is a wrong type, not "unsupported"."""
    error = _error(parse_chat, {"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": value})
    assert error.param == "parallel_tool_calls" and "boolean" in error.message and error.code != "unsupported"


def test_default_only_values_at_their_default_are_accepted():
    assert parse_completion({"prompt": "hi", "echo": False, "suffix": "", "functions": []}).prompts == ["hi"]


def test_logit_bias_keys_become_token_ids():
    assert parse_completion({"prompt": "hi", "logit_bias": {"7": 5, "12": -1.5}}).params.logit_bias == {
        7: 5.0,
        12: -1.5,
    }
    assert parse_completion({"prompt": "hi"}).params.logit_bias == {}
    chat = {"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": False, "tool_choice": "none"}
    assert parse_chat({**chat, "response_format": {"type": "text"}}).messages[0]["content"] == "x"


@pytest.mark.parametrize("max_tokens", [0, -1, "5", 1.5, True])
def test_chat_validates_max_tokens_even_beside_max_completion_tokens(max_tokens):
    body = {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 2, "max_tokens": max_tokens}
    assert _error(parse_chat, body).param == "max_tokens"


def test_chat_max_completion_tokens_wins_over_max_tokens():
    body = {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 2, "max_tokens": 9}
    assert parse_chat(body).params.max_tokens == 2


def test_unknown_parameter_is_named():
    error = _error(parse_chat, {"messages": [{"role": "user", "content": "x"}], "repetition_penalty": 1.1})
    assert error.param == "repetition_penalty" and "repetition_penalty" in error.message


def test_openai_sdk_bookkeeping_fields_are_accepted_and_ignored():
    """OpenAI's clients send these; they change no token, so a 400 would only break the client."""
    body = {"prompt": "hi", "store": True, "metadata": {"k": "v"}, "service_tier": "auto", "user": "u"}
    assert parse_completion(body).prompts == ["hi"]
    assert parse_chat({"messages": [{"role": "user", "content": "x"}], "store": False}).messages[0]["content"] == "x"


def test_errors_say_what_the_field_should_be():
    assert "integer" in _error(parse_completion, {"prompt": "hi", "max_tokens": "5"}).message
    assert "array of token ids" in _error(parse_completion, {"prompt": [1.5]}).message
    assert "text parts" in _error(parse_chat, {"messages": [{"role": "user", "content": [{"type": "image"}]}]}).message
    assert "lone surrogate" in _error(parse_chat, {"messages": [{"role": "user", "content": "\ud800"}]}).message


def test_stream_options_need_stream():
    body = {"prompt": "x", "stream_options": {"include_usage": True}}
    assert _error(parse_completion, body).param == "stream_options"


def test_chat_messages_and_logprobs():
    request = parse_chat(
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": None},
            ],
            "logprobs": True,
            "top_logprobs": 3,
            "max_completion_tokens": 9,
        }
    )
    assert request.messages[1] == {"role": "user", "content": "ab"}
    assert request.messages[2]["content"] == ""
    assert request.params.logprobs == 3 and request.params.max_tokens == 9
    assert parse_chat({"messages": [{"role": "user", "content": "x"}]}).params.logprobs is None
    assert parse_chat({"messages": [{"role": "user", "content": "x"}], "logprobs": True}).params.logprobs == 0


@pytest.mark.parametrize(
    "messages, param",
    [
        ([], "messages"),
        ("hi", "messages"),
        ([{"role": "wizard", "content": "x"}], "messages[0].role"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], "messages[0].content"),
        ([{"role": "user", "content": "\ud800"}], "messages[0].content"),
        ([{"role": "user", "content": "x", "tool_calls": []}], "messages[0].tool_calls"),
        ([{"role": "user", "content": "x"}, {"role": "tool", "content": "sunny"}], "messages[1].tool_call_id"),
        (["hi"], "messages[0]"),
    ],
)
def test_bad_messages(messages, param):
    assert _error(parse_chat, {"messages": messages}).param == param


def test_top_logprobs_needs_logprobs():
    error = _error(parse_chat, {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})
    assert error.param == "top_logprobs"


def test_lone_surrogate_prompt_is_rejected():
    assert _error(parse_completion, {"prompt": "ok \udcff"}).param == "prompt"


def test_tokenize_and_detokenize_requests():
    assert parse_tokenize({"prompt": "hi"}).add_special_tokens is True
    assert parse_tokenize({"messages": [{"role": "user", "content": "x"}]}).messages[0]["role"] == "user"
    assert _error(parse_tokenize, {}).param == "prompt"
    assert parse_detokenize({"tokens": [1, 2]}, vocab_size=10) == [1, 2]
    assert _error(parse_detokenize, {"tokens": [10]}, 10).param == "tokens"
    assert _error(parse_detokenize, {"tokens": "1"}, 10).param == "tokens"


def test_a_replayed_refusal_is_accepted_and_rendered_as_what_the_assistant_said():
    """OpenAI returns `refusal` (a field, or a content part) and clients replay the history: a user trial found it
    refused as "not supported" (2026-12-08)."""
    user = {"role": "user", "content": "hi"}
    field = {"role": "assistant", "content": None, "refusal": "I cannot help with that."}
    parts = {"role": "assistant", "content": [{"type": "text", "text": "No: "}, {"type": "refusal", "refusal": "no."}]}
    for turn, said in ((field, "I cannot help with that."), (parts, "No: no.")):
        parsed = parse_chat({"messages": [user, turn, {"role": "user", "content": "ok"}]})
        assert parsed.messages[1]["content"] == said  # as the chat template gets it
    misplaced = {"role": "user", "content": [{"type": "refusal", "refusal": "x"}]}
    assert _error(parse_chat, {"messages": [misplaced]}).param == "messages[0].content"
    assert _error(parse_chat, {"messages": [{"role": "user", "content": "x", "refusal": "y"}]}).param == (
        "messages[0].refusal"
    )
