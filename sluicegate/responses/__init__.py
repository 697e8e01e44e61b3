"""OpenAI's Responses API (`/v1/responses`, stateless) mapped onto the chat path, for the gateway and the replica alike.

A Responses request becomes a chat completions body (request.py); the replica answers it as any chat request, and
the answer comes back as a Response object (answer.py) or, streamed, as the Responses API's semantic events
(stream.py). The gateway translates at its edge, so admission, token counts, routing, guardrails and settlement see
an ordinary chat request; a replica serves /v1/responses with the same translation. Torch-free.
"""

from sluicegate.responses.answer import ResponseHead, response_object
from sluicegate.responses.request import ResponsesRequestError, responses_names, to_chat
from sluicegate.responses.stream import ResponsesStream

__all__ = ["ResponseHead", "ResponsesRequestError", "ResponsesStream", "response_object", "responses_names", "to_chat"]
