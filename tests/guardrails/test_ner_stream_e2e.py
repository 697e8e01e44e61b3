"""A name in a streamed answer, end to end: the `openai` client -> gateway (uvicorn on loopback, GuardrailHooks with
a names policy) -> an upstream that streams the answer in 1-3 character chunks, so the name arrives in pieces."""

import json

import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from gateway.app import build_app
from gateway.config import config_from_dict
from gateway.errors import invalid_request
from guardrails import GuardrailPolicy
from guardrails.gateway_hooks import GuardrailHooks
from tests.gateway.servers import ThreadServer

ADMIN = "ner-e2e-admin"
ANSWER = "Sure. I forwarded your note to Maria Gonzalez, who will call you tomorrow from the office."
EXPECTED = "Sure. I forwarded your note to <PERSON>, who will call you tomorrow from the office."
CHUNK_CHARS = (1, 3, 2)  # cycled: the name "Maria Gonzalez" is cut at many places


def _chunks(text: str) -> list[str]:
    out, i, k = [], 0, 0
    while i < len(text):
        size = CHUNK_CHARS[k % len(CHUNK_CHARS)]
        out.append(text[i : i + size])
        i, k = i + size, k + 1
    return out


async def chat(request: Request):
    body = await request.json()
    assert body.get("stream")

    async def events():
        for piece in _chunks(ANSWER):
            chunk = {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "tiny",
                "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
            }
            yield f"data: {json.dumps(chunk)}\n\n"
        done = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "tiny",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
        yield f"data: {json.dumps(done)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def served(guardrails_engine):
    import httpx

    upstream = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/health", lambda r: JSONResponse({"ok": True})),
        ]
    )
    policies = {
        "names": GuardrailPolicy(
            pii_entities=("PERSON", "LOCATION", "ORGANIZATION", "EMAIL_ADDRESS"), output_pii_action="redact"
        )
    }
    hooks = GuardrailHooks(
        guardrails_engine,
        policies,
        on_block=lambda blocked: invalid_request(str(blocked), code="content_policy_violation"),
    )
    with ThreadServer(upstream) as up:
        config = {"admin_token": ADMIN, "models": {"tiny": {"replicas": [up.url], "tokenizer": None}}}
        with ThreadServer(build_app(config_from_dict(config), hooks=hooks)) as gateway:
            admin = httpx.Client(base_url=gateway.url + "/admin/v1", headers={"authorization": f"Bearer {ADMIN}"})
            assert admin.post("/tenants", json={"id": "names", "guardrails": "names"}).status_code == 201
            key = admin.post("/tenants/names/keys", json={}).json()["key"]
            yield gateway, key
            admin.close()


def test_a_name_streamed_in_small_chunks_is_redacted(served):
    gateway, key = served
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0, timeout=20)
    stream = client.chat.completions.create(model="tiny", stream=True, messages=[{"role": "user", "content": "hi"}])
    pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
    assert "".join(pieces) == EXPECTED
    assert not any(part in piece for piece in pieces for part in ("Mar", "Gon", "ria", "lez"))
