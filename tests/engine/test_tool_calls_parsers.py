"""The tool-call parsers on crafted texts: whole, and streamed in small chunks (the deltas must assemble to the
whole answer), plus the plan's request rules and the forced-call grammars compiled by xgrammar."""

from __future__ import annotations

import json

import pytest
import xgrammar as xgr

from engine.errors import RequestError
from engine.structured.compiler import tool_calls_ebnf
from engine.tools.calls import ToolCall
from engine.tools.parsers import tool_parser
from engine.tools.plan import ToolChoice, tool_plan
from engine.tools.response import ToolDeltas, finish_reason, message

WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
TIME = {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}
TOOLS = [{"type": "function", "function": WEATHER}, {"type": "function", "function": TIME}]

PARIS = ToolCall("get_weather", '{"city": "Paris"}')
UTC = ToolCall("get_time", '{"zone": "UTC"}')
# parser, text, expected content, expected calls
CASES = [
    ("hermes", 'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     "Let me check.", [PARIS]),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
     '<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>', "", [PARIS, UTC]),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": "Par', None, []),  # unterminated
    ("hermes", "<tool_call>not json</tool_call> and more", None, []),
    ("hermes", "Just <tool text, a < b.", None, []),
    ("llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [PARIS]),
    ("llama3_json", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
     '{"name": "get_time", "parameters": {"zone": "UTC"}}', "", [PARIS, UTC]),
    ("llama3_json", '  {"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}', "", [PARIS]),
    ("llama3_json", '{"weather": "sunny"}', None, []),  # JSON, but no call
    ("llama3_json", "The weather is {sunny}.", None, []),
    ("llama3_json", "<|python", None, []),
    ("mistral", 'Sure. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
     '{"name": "get_time", "arguments": {"zone": "UTC"}}]', "Sure. ", [PARIS, UTC]),
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Pa', None, []),
    ("mistral", "An array [1, 2] is not a call.", None, []),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "content", "calls"), CASES)
def test_whole_text(name, text, content, calls):
    found = tool_parser(name).extract(text, final=True)
    assert found.calls == calls
    assert found.content == (text if content is None else content)


@pytest.mark.parametrize(("name", "text", "content", "calls"), CASES)
@pytest.mark.parametrize("chunk_chars", [1, 3, 7])
def test_streamed_deltas_assemble_to_the_whole_answer(name, text, content, calls, chunk_chars):
    parser = tool_parser(name)
    deltas = ToolDeltas(parser)
    payloads = []
    for start in range(0, len(text), chunk_chars):
        payloads += deltas.feed(text[start : start + chunk_chars])
    payloads += deltas.finish()
    streamed_content = "".join(p.get("content", "") for p in payloads)
    streamed: dict[int, dict] = {}
    for payload in payloads:
        for call in payload.get("tool_calls", []):
            if "id" in call:  # the first delta of a call: id, type, name, empty arguments
                assert call["index"] not in streamed and call["type"] == "function" and call["id"].startswith("call_")
                assert call["function"]["arguments"] == ""
                streamed[call["index"]] = {"name": call["function"]["name"], "arguments": ""}
            else:
                assert set(call["function"]) == {"arguments"}
                streamed[call["index"]]["arguments"] += call["function"]["arguments"]
    whole, called = message(parser, text)
    assert called == bool(calls) == deltas.called
    assert list(streamed) == list(range(len(calls)))
    assert [ToolCall(c["name"], c["arguments"]) for c in streamed.values()] == calls
    assert [ToolCall(**c["function"]) for c in whole.get("tool_calls", [])] == calls
    assert streamed_content == (whole["content"] or "")


def test_content_is_not_sent_while_it_may_be_a_marker():
    deltas = ToolDeltas(tool_parser("hermes"))
    assert deltas.feed("Hi <tool") == [{"content": "Hi "}]
    assert deltas.feed("_ca") == []
    assert deltas.feed("rrot") == [{"content": "<tool_carrot"}]


def test_whole_message_shape():
    parser = tool_parser("hermes")
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    body, called = message(parser, text)
    assert called and body["content"] is None and body["role"] == "assistant"
    (call,) = body["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_") and len(call["id"]) > 10
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert message(parser, "plain")[0] == {"role": "assistant", "content": "plain"}
    assert finish_reason("stop", True) == "tool_calls"
    assert finish_reason("length", True) == "length" and finish_reason("stop", False) == "stop"


def test_plan_rules():
    assert tool_plan(None, None) is None and tool_plan([], "auto") is None
    assert tool_plan(TOOLS, None).choice is ToolChoice.AUTO
    assert not tool_plan(TOOLS, "none").parses
    named = tool_plan(TOOLS, {"type": "function", "function": {"name": "get_time"}})
    assert named.choice is ToolChoice.NAMED and named.function == "get_time"
    for tools, choice, param in [
        (None, "required", "tool_choice"),
        (TOOLS, {"type": "function", "function": {"name": "missing"}}, "tool_choice"),
        (TOOLS + TOOLS[:1], "auto", "tools"),
    ]:
        with pytest.raises(RequestError) as info:
            tool_plan(tools, choice)
        assert info.value.param == param


@pytest.mark.parametrize("name", ["hermes", "llama3_json", "mistral"])
def test_forced_grammar_accepts_a_call_in_the_parsers_format_only(name, tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    parser = tool_parser(name)
    plan = tool_plan(TOOLS, {"type": "function", "function": {"name": "get_time"}})
    spec = plan.grammar(parser)
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer)).compile_grammar(
        tool_calls_ebnf(spec.source)
    )
    good = {
        "hermes": '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>',
        "llama3_json": '{"name": "get_time", "parameters": {"zone": "UTC"}}',
        "mistral": '[TOOL_CALLS][{"name": "get_time", "arguments": {"zone": "UTC"}}]',
    }[name]

    def accepts(text: str) -> bool:
        matcher = xgr.GrammarMatcher(compiled)
        return matcher.accept_string(text) and matcher.is_completed()

    assert accepts(good)
    assert parser.extract(good, final=True).calls == [UTC]
    assert not accepts(good.replace("get_time", "get_weather"))  # not the named function
    assert not accepts(good.replace('"UTC"', "5"))  # arguments off the schema


def test_first_call_only_when_parallel_calls_are_off():
    from engine.tools.parsers import FirstCallOnly

    text = CASES[1][1]  # two hermes calls
    parser = FirstCallOnly(tool_parser("hermes"))
    assert parser.extract(text, final=True).calls == [PARIS]
    deltas = ToolDeltas(parser)
    payloads = [p for i in range(0, len(text), 5) for p in deltas.feed(text[i : i + 5])] + deltas.finish()
    assert {call["index"] for p in payloads for call in p.get("tool_calls", [])} == {0}


def test_chat_request_wiring():
    from engine.server.errors import InvalidRequestError
    from engine.server.protocol import parse_chat
    from engine.structured.spec import GrammarKind
    from engine.tools.parsers import FirstCallOnly

    call = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}
    messages = [
        {"role": "user", "content": "What time is it?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
    ]
    body = {"messages": messages, "tools": TOOLS}
    forced = parse_chat({**body, "tool_choice": "required"}, tool_parser("mistral"))
    assert forced.params.structured.kind is GrammarKind.TOOL_CALLS and not forced.params.skip_special_tokens
    assert forced.messages[1]["tool_calls"][0]["function"]["arguments"] == {"zone": "UTC"}
    assert forced.messages[1]["content"] == "" and forced.messages[2]["tool_call_id"] == "call_1"
    auto = parse_chat(body, tool_parser("hermes"))
    assert auto.params.structured is None and auto.tool_parser is not None and auto.tools.tools == TOOLS
    single = parse_chat({**body, "parallel_tool_calls": False}, tool_parser("hermes"))
    assert isinstance(single.tool_parser, FirstCallOnly)
    rendered_only = parse_chat({**body, "tool_choice": "none"})
    assert rendered_only.tool_parser is None and rendered_only.tools.tools == TOOLS
    for extra, parser, param in [
        ({}, None, "tool_choice"),  # auto needs a parser
        ({"tool_choice": "required", "guided_regex": "a"}, tool_parser("hermes"), "tool_choice"),
        ({"tool_choice": "required", "min_tokens": 1}, tool_parser("hermes"), "min_tokens"),
    ]:
        with pytest.raises(InvalidRequestError) as info:
            parse_chat({**body, **extra}, parser)
        assert info.value.param == param


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ({"role": "user", "content": "x", "tool_calls": []}, "messages[0].tool_calls"),
        ({"role": "assistant", "content": "x", "tool_call_id": "call_1"}, "messages[0].tool_call_id"),
        ({"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]},
         "messages[0].tool_calls[0].function.arguments"),
    ],
)  # fmt: skip
def test_tool_fields_in_the_wrong_message_are_400s(message, param):
    from engine.server.errors import InvalidRequestError
    from engine.server.protocol import parse_chat

    with pytest.raises(InvalidRequestError) as info:
        parse_chat({"messages": [message]})
    assert info.value.param == param


def test_a_tool_without_its_function_names_it():
    """Was "Missing required parameter: 'tools'" for a tool that lacks only its function."""
    from engine.server.errors import InvalidRequestError
    from engine.server.protocol import parse_chat

    with pytest.raises(InvalidRequestError) as info:
        parse_chat({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})
    assert info.value.param == "tools[0].function" and "'tools[0].function'" in str(info.value)
