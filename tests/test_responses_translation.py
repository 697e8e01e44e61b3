"""The Responses API translation on its own (sluicegate/responses/): request mapping edge cases, and the stream
translator under any chunking, with text after a call, errors and early ends. End to end it is tested with the
official client in tests/engine/server/test_responses_server.py."""

from __future__ import annotations

import json
import random

import pytest

from sluicegate.responses import ResponseHead, ResponsesRequestError, ResponsesStream, response_object, to_chat
from sluicegate.sse import parse_event, split_events

HEAD = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}


def _chunk(delta: dict | None = None, finish: str | None = None, **extra) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + json.dumps({**HEAD, "choices": choices, **extra}).encode() + b"\n\n"


CALL = {"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}}
CHAT_STREAM = b"".join(
    [
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "Let me "}),
        _chunk({"content": "check."}),
        _chunk({"tool_calls": [CALL]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x": '}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        _chunk({"tool_calls": [{**CALL, "index": 1, "id": "call_b", "function": {"name": "g", "arguments": "{}"}}]}),
        _chunk({}, "tool_calls"),
        _chunk(None, usage={"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}),
        b"data: [DONE]\n\n",
    ]
)


def _events(data: bytes) -> list[dict]:
    events = []
    for raw in split_events(data):
        event = parse_event(raw)
        assert event is not None
        payload = json.loads(event.data)
        assert event.event == payload["type"]
        events.append(payload)
    return events


def _translate(chunks: list[bytes]) -> list[dict]:
    stream = ResponsesStream(ResponseHead.new("m", {"model": "m", "input": "hi"}))
    return _events(b"".join(stream.feed(c) for c in chunks) + stream.close())


@pytest.mark.parametrize("seed", range(5))
def test_any_chunking_gives_the_same_events(seed):
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(CHAT_STREAM)), 40))
    pieces = [CHAT_STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(CHAT_STREAM)])]
    whole, chunked = _translate([CHAT_STREAM]), _translate(pieces)
    strip = [{k: v for k, v in e.items() if k not in ("response", "item", "item_id")} for e in whole]
    assert strip == [{k: v for k, v in e.items() if k not in ("response", "item", "item_id")} for e in chunked]


def test_text_then_two_calls():
    events = _translate([CHAT_STREAM])
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds.count("response.output_item.added") == 3 and kinds.count("response.output_item.done") == 3
    # The message closes before the first call opens; calls close at the end, each with its whole arguments.
    assert kinds.index("response.output_text.done") < kinds.index("response.function_call_arguments.delta")
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert [(e["name"], e["arguments"], e["output_index"]) for e in done] == [("f", '{"x": 1}', 1), ("g", "{}", 2)]
    final = events[-1]
    assert final["type"] == "response.completed"
    output = final["response"]["output"]
    assert [item["type"] for item in output] == ["message", "function_call", "function_call"]
    assert output[0]["content"][0]["text"] == "Let me check."
    assert [item["call_id"] for item in output[1:]] == ["call_a", "call_b"]
    assert final["response"]["usage"]["input_tokens"] == 7 and final["response"]["usage"]["output_tokens"] == 5


def test_an_error_event_fails_the_response_and_ends_it():
    error = b'data: {"error": {"message": "blocked", "type": "invalid_request_error", "code": "content_policy_violation"}}\n\n'
    events = _translate([_chunk({"content": "Hi"}), error, b"data: [DONE]\n\n"])
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"] == {"code": "content_policy_violation", "message": "blocked"}
    assert sum(e["type"].startswith("response.failed") for e in events) == 1


def test_a_stream_cut_short_fails():
    events = _translate([_chunk({"content": "Hi"})])
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "upstream_error"


def test_length_is_incomplete_whole_and_streamed():
    events = _translate([_chunk({"content": "Hi"}), _chunk({}, "length"), b"data: [DONE]\n\n"])
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert events[-1]["response"]["output"][0]["status"] == "incomplete"
    chat = {"choices": [{"index": 0, "message": {"content": "Hi"}, "finish_reason": "length"}], "usage": None}
    whole = response_object(chat, ResponseHead.new("m", {"input": "x"}))
    assert whole["status"] == "incomplete" and whole["incomplete_details"] == {"reason": "max_output_tokens"}


def test_function_calls_merge_into_the_assistant_message_before_them():
    chat = to_chat(
        {
            "model": "m",
            "instructions": "sys",
            "input": [
                {"role": "developer", "content": "dev"},
                {"role": "user", "content": "q"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "r1"},
                {"type": "reasoning", "summary": []},
            ],
            "stream": True,
            "max_output_tokens": 9,
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}, "strict": True}},
        }
    )
    roles = [(m["role"], m.get("content")) for m in chat["messages"]]
    assert roles == [("system", "sys"), ("system", "dev"), ("user", "q"), ("assistant", "a"), ("tool", "r1")]
    assert [c["id"] for c in chat["messages"][3]["tool_calls"]] == ["c1", "c2"]
    assert chat["stream_options"] == {"include_usage": True} and chat["max_tokens"] == 9
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "s", "schema": {"type": "object"}, "strict": True},
    }


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x", "stream": "yes"}, "stream"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
        ({"input": "x", "instructions": 3}, "instructions"),
        ({"instructions": "only a system prompt", "input": [{"role": "system", "content": "x"}]}, "input"),
        ({"input": "x", "tools": {"type": "function"}}, "tools"),
        ({"input": "x", "text": {"format": {"type": "json_schema", "name": "s"}}}, "text.format.schema"),
        # not a Responses API field: refused, not dropped (another API's parameter, or a typo)
        ({"input": "x", "guided_choice": ["a"]}, "guided_choice"),
        ({"input": "x", "max_tokens": 5}, "max_tokens"),
    ],
)
def test_bad_requests_name_the_field(body, param):
    with pytest.raises(ResponsesRequestError) as refused:
        to_chat(body)
    assert refused.value.param == param
