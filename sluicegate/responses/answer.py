"""A chat completion as a Response object: the answer's items, its status and usage, and the request's settings echoed
the way OpenAI echoes them.

    message.content                      -> a `message` item with one `output_text` part
    message.tool_calls                   -> a `function_call` item each (call_id: the chat call's id)
    finish_reason "length"               -> status "incomplete", incomplete_details.reason "max_output_tokens"
    finish_reason "content_filter"       -> status "incomplete", reason "content_filter"
    usage prompt/completion tokens       -> input_tokens / output_tokens (cached tokens kept)
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from sluicegate.responses.request import JsonObject, chat_tools

_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True)
class ResponseHead:
    """What every Response object of one request shares: its id, time, model and the request's echoed settings."""

    id: str
    created_at: int
    model: str
    request: JsonObject
    """The client's Responses body (already checked by to_chat)."""

    @classmethod
    def new(cls, model: str, request: JsonObject) -> ResponseHead:
        return cls(new_id("resp"), int(time.time()), model, request)

    def response(self, status: str, output: list[JsonObject], usage: JsonObject | None = None) -> JsonObject:
        """The Response object in `status`, with `output` items and (once known) usage in Responses' shape."""
        body = self.request
        text = body.get("text") if isinstance(body.get("text"), dict) else None
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": self.model,
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None},
            "store": False,
            "temperature": body.get("temperature", 1.0),
            "text": {"format": {"type": "text"}, **(text or {})},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": [_echoed_tool(t) for t in chat_tools(body["tools"])] if body.get("tools") else [],
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation", "disabled"),
            "usage": response_usage(usage) if usage is not None else None,
            "user": body.get("user"),
            "metadata": body.get("metadata") or {},
        }


def response_object(chat: JsonObject, head: ResponseHead) -> JsonObject:
    """The Response for a whole chat completion (its first choice: the Responses API has no `n`)."""
    choice = chat["choices"][0]
    message = choice.get("message") or {}
    output: list[JsonObject] = []
    content = message.get("content")
    reason = incomplete_reason(choice.get("finish_reason"))
    item_status = "incomplete" if reason else "completed"
    if content:
        output.append(message_item(new_id("msg"), content, item_status))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        output.append(
            call_item(
                new_id("fc"), call.get("id", ""), function.get("name", ""), function.get("arguments", ""), item_status
            )
        )
    response = head.response("incomplete" if reason else "completed", output, chat.get("usage"))
    if reason:
        response["incomplete_details"] = {"reason": reason}
    return response


def incomplete_reason(finish_reason: str | None) -> str | None:
    """The Responses API's incomplete_details.reason for a chat finish_reason; None when the answer is complete."""
    return _INCOMPLETE.get(finish_reason or "")


def message_item(item_id: str, text: str, status: str) -> JsonObject:
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [output_text(text)],
    }


def output_text(text: str) -> JsonObject:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> JsonObject:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def response_usage(usage: dict[str, Any]) -> JsonObject:
    prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def _echoed_tool(tool: JsonObject) -> JsonObject:
    function = tool["function"]
    return {
        "type": "function",
        "name": function.get("name"),
        "description": function.get("description"),
        "parameters": function.get("parameters"),
        "strict": function.get("strict"),
    }
