"""A chat completion stream as the Responses API's semantic events, translated as the chat chunks arrive.

    first bytes         response.created, response.in_progress
    content delta       (response.output_item.added + response.content_part.added, once) response.output_text.delta
    tool-call delta     (the open message item closed; response.output_item.added for a new call index)
                        response.function_call_arguments.delta
    usage chunk         kept for the end
    data: [DONE]        every open item closed (..._text.done / ..._arguments.done, content_part.done,
                        output_item.done), then response.completed, or response.incomplete (max_output_tokens)
    an error event      response.failed with the error; the stream ends there
    the end, early      (close() without [DONE]) response.failed

Events are written `event: <type>` + `data: <json>` with a `sequence_number` counting from 0, as OpenAI writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sluicegate.responses.answer import (
    ResponseHead,
    call_item,
    incomplete_reason,
    message_item,
    new_id,
    output_text,
)
from sluicegate.responses.request import JsonObject
from sluicegate.sse import DONE_DATA, SseSplitter, event_data, split_events


@dataclass
class _OpenMessage:
    output_index: int
    item_id: str
    text: list[str] = field(default_factory=list)


@dataclass
class _OpenCall:
    output_index: int
    item_id: str
    call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)


class ResponsesStream:
    """Chat SSE bytes in (any chunking), Responses SSE bytes out."""

    def __init__(self, head: ResponseHead) -> None:
        self._head = head
        self._splitter = SseSplitter()
        self._sequence = 0
        self._started = False
        self.ended = False
        """response.completed, .incomplete or .failed has been written: nothing more will be."""
        self._output: dict[int, JsonObject] = {}  # output_index -> its finished item
        self._message: _OpenMessage | None = None
        self._calls: dict[int, _OpenCall] = {}  # the chat delta's tool-call index -> its open item
        self._finish_reason: str | None = None
        self._usage: JsonObject | None = None

    def feed(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        if not self._started:
            self._start(out)
        for event in split_events(self._splitter.feed(chunk)):
            if self.ended:
                break
            payload = event_data(event)
            if payload is None:
                continue
            if payload == DONE_DATA:
                self._finish(out)
                continue
            try:
                obj = json.loads(payload)
            except ValueError:
                continue
            if isinstance(obj, dict):
                self._chunk(obj, out)
        return b"".join(out)

    def close(self) -> bytes:
        """The end of the chat stream: a stream that ended without [DONE] (or an error) fails."""
        out: list[bytes] = []
        if not self._started:
            self._start(out)
        if not self.ended:
            self._fail({"code": "upstream_error", "message": "The upstream ended the stream early."}, out)
        return b"".join(out)

    def _start(self, out: list[bytes]) -> None:
        self._started = True
        created = self._head.response("in_progress", [])
        self._emit(out, "response.created", response=created)
        self._emit(out, "response.in_progress", response=created)

    def _chunk(self, obj: JsonObject, out: list[bytes]) -> None:
        error = obj.get("error")
        if isinstance(error, dict):
            self._fail(error, out)
            return
        if isinstance(obj.get("usage"), dict):
            self._usage = obj["usage"]
        choices = obj.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # the Responses API has no n: one choice
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                self._text(delta["content"], out)
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    self._call(call, out)
            if choice.get("finish_reason"):
                self._finish_reason = choice["finish_reason"]

    def _text(self, text: str, out: list[bytes]) -> None:
        message = self._message
        if message is None:
            message = self._message = _OpenMessage(self._next_index(), new_id("msg"))
            item = message_item(message.item_id, "", "in_progress")
            item["content"] = []
            self._emit(out, "response.output_item.added", output_index=message.output_index, item=item)
            self._emit(
                out, "response.content_part.added", item_id=message.item_id, output_index=message.output_index,
                content_index=0, part=output_text(""),
            )  # fmt: skip
        message.text.append(text)
        self._emit(
            out, "response.output_text.delta", item_id=message.item_id, output_index=message.output_index,
            content_index=0, delta=text, logprobs=[],
        )  # fmt: skip

    def _call(self, delta: JsonObject, out: list[bytes]) -> None:
        index = delta.get("index", 0)
        function = delta.get("function") or {}
        call = self._calls.get(index)
        if call is None:
            self._close_message(out)  # text before a call is its own item, finished when the call starts
            call = _OpenCall(
                self._next_index(), new_id("fc"), delta.get("id") or new_id("call"), function.get("name") or ""
            )
            self._calls[index] = call
            item = call_item(call.item_id, call.call_id, call.name, "", "in_progress")
            self._emit(out, "response.output_item.added", output_index=call.output_index, item=item)
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            call.arguments.append(arguments)
            self._emit(
                out, "response.function_call_arguments.delta", item_id=call.item_id,
                output_index=call.output_index, delta=arguments,
            )  # fmt: skip

    def _finish(self, out: list[bytes]) -> None:
        reason = incomplete_reason(self._finish_reason)
        status = "incomplete" if reason else "completed"
        self._close_message(out, status)
        for call in self._calls.values():
            arguments = "".join(call.arguments)
            self._emit(
                out, "response.function_call_arguments.done", item_id=call.item_id,
                output_index=call.output_index, name=call.name, arguments=arguments,
            )  # fmt: skip
            self._done(out, call.output_index, call_item(call.item_id, call.call_id, call.name, arguments, status))
        self._calls.clear()
        response = self._head.response(status, self._finished_output(), self._usage)
        if reason:
            response["incomplete_details"] = {"reason": reason}
        self._emit(out, "response.incomplete" if reason else "response.completed", response=response)
        self.ended = True

    def _close_message(self, out: list[bytes], status: str = "completed") -> None:
        message = self._message
        if message is None:
            return
        self._message = None
        text = "".join(message.text)
        where = {"item_id": message.item_id, "output_index": message.output_index, "content_index": 0}
        self._emit(out, "response.output_text.done", **where, text=text, logprobs=[])
        self._emit(out, "response.content_part.done", **where, part=output_text(text))
        self._done(out, message.output_index, message_item(message.item_id, text, status))

    def _done(self, out: list[bytes], output_index: int, item: JsonObject) -> None:
        self._output[output_index] = item
        self._emit(out, "response.output_item.done", output_index=output_index, item=item)

    def _fail(self, error: JsonObject, out: list[bytes]) -> None:
        response = self._head.response("failed", self._finished_output(), self._usage)
        response["error"] = {
            "code": str(error.get("code") or error.get("type") or "server_error"),
            "message": str(error.get("message") or "The request failed."),
        }
        self._emit(out, "response.failed", response=response)
        self.ended = True

    def _finished_output(self) -> list[JsonObject]:
        return [self._output[index] for index in sorted(self._output)]

    def _next_index(self) -> int:
        return len(self._output) + (self._message is not None) + len(self._calls)

    def _emit(self, out: list[bytes], kind: str, **fields: object) -> None:
        payload = json.dumps({"type": kind, "sequence_number": self._sequence, **fields}, ensure_ascii=False)
        self._sequence += 1
        out.append(b"event: " + kind.encode() + b"\ndata: " + payload.encode() + b"\n\n")
