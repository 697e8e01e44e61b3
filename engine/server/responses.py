"""/v1/responses on a replica: the request translated to chat (sluicegate/responses/), generated as a chat request,
and its answer translated back, whole or as the Responses API's streamed events."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable

from starlette.responses import JSONResponse, Response, StreamingResponse

from engine.server import sse
from engine.server.errors import APIError, InvalidRequestError
from sluicegate.responses import (
    ResponseHead,
    ResponsesRequestError,
    ResponsesStream,
    response_object,
    responses_names,
    to_chat,
)
from sluicegate.responses.request import JsonObject


def chat_body(body: JsonObject) -> JsonObject:
    """The chat body for a Responses request; a request it cannot serve is a 400 naming the field."""
    try:
        return to_chat(body)
    except ResponsesRequestError as exc:
        raise InvalidRequestError(exc.message, param=exc.param) from None


async def serve(
    body: JsonObject, model_name: str, generate_chat: Callable[[JsonObject], Awaitable[Response]]
) -> Response:
    """The Responses answer to `body`, from `generate_chat`'s answer to the equivalent chat body."""
    chat = chat_body(body)
    head = ResponseHead.new(model_name, body)
    try:
        answer = await generate_chat(chat)
    except APIError as exc:  # found on the chat request: named as the client's Responses request names it
        exc.message, exc.param = responses_names(exc.message, exc.param)
        raise
    if isinstance(answer, StreamingResponse):
        return sse.response(_translated(answer.body_iterator, ResponsesStream(head)))
    if answer.status_code != 200:
        return answer  # 499: the client left; nobody reads it
    return JSONResponse(response_object(json.loads(bytes(answer.body)), head))


async def _translated(chunks: AsyncIterable[str | bytes | memoryview], stream: ResponsesStream) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            events = stream.feed(chunk.encode() if isinstance(chunk, str) else bytes(chunk))
            if events:
                yield events
        yield stream.close()
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()  # the chat stream's own cleanup aborts the engine request if the client left
