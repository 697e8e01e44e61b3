"""The red team's guardrail bypasses (issue 15), end to end: the official `openai` client -> a gateway built from a
config with a `guardrails` section (gateway/request/guardrail_wiring.py) -> an upstream on loopback that keeps every
body it received and answers with PII, logprobs included. Input checks assert on what the upstream received;
output checks on what the client got."""

from __future__ import annotations

import base64
import json
import re
import unicodedata

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from gateway.app import build_app
from gateway.config import config_from_dict
from tests.gateway.servers import ThreadServer

ADMIN = "bypasses-admin"
EMAIL = "john.doe@example.com"
CARD = "4111 1111 1111 1111"
ANSWER = f"Reach Li at {EMAIL} or pay with {CARD}, thanks."
ANSWER_REDACTED = "Reach Li at <EMAIL_ADDRESS> or pay with <CREDIT_CARD>, thanks."
NAME_ANSWER = (
    "Sure. I forwarded your note to Maria Gonzalez, who lives at 2212 Orchard Way, Delhi, WA 78878 and will call "
    "you tomorrow."
)
NAME_REDACTED = "Sure. I forwarded your note to <PERSON>, who lives at <LOCATION> and will call you tomorrow."
# Pieces of the PII in ANSWER that no token or alternative may carry once redacted.
LEAKS = ("john", "doe", "example", "4111", "1111")
STRICT = {"pii_action": "redact", "output_pii_action": "redact"}
NAMES = {"pii_entities": ["PERSON", "LOCATION", "EMAIL_ADDRESS"], "pii_action": "redact", "output_pii_action": "redact"}


def _tokens(text: str) -> list[str]:
    """A tokenizer's view: words with their leading space, single punctuation marks."""
    tokens = re.findall(r" ?\w+| ?[^\w\s]|\s+", text)
    assert "".join(tokens) == text
    return tokens


def _chat_logprobs(tokens: list[str]) -> dict:
    def entry(token: str, logprob: float) -> dict:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    return {"content": [{**entry(t, -0.1), "top_logprobs": [entry(t, -0.1), entry(t.upper(), -2.0)]} for t in tokens]}


def _completion_logprobs(tokens: list[str], offset: int) -> dict:
    offsets = [offset + sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
    return {
        "tokens": tokens,
        "token_logprobs": [-0.1] * len(tokens),
        "top_logprobs": [{t: -0.1, t.upper(): -2.0} for t in tokens],
        "text_offset": offsets,
    }


class Upstream:
    """Keeps the bodies it received; answers ANSWER (or NAME_ANSWER when the body says `"fake": "names"`), with
    logprobs when asked, streamed one token (or, for names, 1-3 characters) per chunk."""

    def __init__(self) -> None:
        self.received: list[dict] = []
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/health", lambda r: JSONResponse({"ok": True})),
            ]
        )

    async def chat(self, request: Request):
        return await self._answer(request, chat=True)

    async def completions(self, request: Request):
        return await self._answer(request, chat=False)

    async def _answer(self, request: Request, chat: bool):
        body = await request.json()
        self.received.append(body)
        names = body.get("fake") == "names"
        answer = NAME_ANSWER if names else ANSWER
        pieces = _name_chunks(answer) if names else _tokens(answer)
        logprobs = bool(body.get("logprobs"))
        usage = {"prompt_tokens": 9, "completion_tokens": len(pieces), "total_tokens": 9 + len(pieces)}
        head = {"id": "c", "created": 0, "model": "tiny"}
        if not body.get("stream"):
            if chat:
                lp = _chat_logprobs(pieces) if logprobs else None
                message = {"role": "assistant", "content": answer}
                choice = {"index": 0, "message": message, "logprobs": lp, "finish_reason": "stop"}
                return JSONResponse({**head, "object": "chat.completion", "usage": usage, "choices": [choice]})
            lp = _completion_logprobs(pieces, 0) if logprobs else None
            choice = {"index": 0, "text": answer, "logprobs": lp, "finish_reason": "stop"}
            return JSONResponse({**head, "object": "text_completion", "usage": usage, "choices": [choice]})

        async def events():
            offset = 0
            for piece in pieces:
                if chat:
                    lp = _chat_logprobs([piece]) if logprobs else None
                    choice = {"index": 0, "delta": {"content": piece}, "logprobs": lp, "finish_reason": None}
                    chunk = {**head, "object": "chat.completion.chunk", "choices": [choice]}
                else:
                    lp = _completion_logprobs([piece], offset) if logprobs else None
                    choice = {"index": 0, "text": piece, "logprobs": lp, "finish_reason": None}
                    chunk = {**head, "object": "text_completion", "choices": [choice]}
                offset += len(piece)
                yield f"data: {json.dumps(chunk)}\n\n"
            last = {"index": 0, "logprobs": None, "finish_reason": "stop"}
            last.update({"delta": {}} if chat else {"text": ""})
            yield f"data: {json.dumps({**head, 'object': 'x', 'choices': [last]})}\n\n"
            yield f"data: {json.dumps({**head, 'object': 'x', 'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


def _name_chunks(text: str) -> list[str]:
    sizes, out, i = (1, 3, 2), [], 0
    while i < len(text):
        out.append(text[i : i + sizes[len(out) % 3]])
        i += len(out[-1])
    return out


@pytest.fixture(scope="module")
def served():
    upstream = Upstream()
    with ThreadServer(upstream.app) as up:
        config = {
            "admin_token": ADMIN,
            "models": {"tiny": {"replicas": [up.url], "tokenizer": None}},
            "guardrails": {"engine": {}, "policies": {"strict": STRICT, "names": NAMES}},
        }
        with ThreadServer(build_app(config_from_dict(config))) as gateway:
            admin = httpx.Client(base_url=gateway.url + "/admin/v1", headers={"authorization": f"Bearer {ADMIN}"})
            keys = {}
            for policy in ("strict", "names"):
                assert admin.post("/tenants", json={"id": policy, "guardrails": policy}).status_code == 201
                keys[policy] = admin.post(f"/tenants/{policy}/keys", json={}).json()["key"]
            admin.close()
            clients = {
                name: openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0, timeout=30)
                for name, key in keys.items()
            }
            yield clients, upstream


def _sent(upstream: Upstream) -> str:
    """Everything the upstream received in the last body, as the model would read it (normalized)."""
    text = json.dumps(upstream.received[-1], ensure_ascii=False)
    return unicodedata.normalize("NFKC", re.sub(r"[\u200b-\u200f\u2060\ufeff]", "", text))


def _chat(served, messages: list[dict], **extra):
    clients, upstream = served
    clients["strict"].chat.completions.create(model="tiny", messages=messages, **extra)
    return upstream.received[-1]


# 1. PII split across the text parts of one message: the engine joins the parts with nothing.
@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        (["write to john.do", "e@example.com please"], "write to <EMAIL_ADDRESS> please"),
        (["card 4111 1111 ", "1111 1111 ok"], "card <CREDIT_CARD> ok"),
        (["mail john", ".doe@exa", "mple.com now"], "mail <EMAIL_ADDRESS> now"),
        # the next part glued to the domain: the address was missed whole (a user trial, 2026-12-08)
        (["Email bob@example.org.", "Thanks for help"], "Email <EMAIL_ADDRESS>.Thanks for help"),
        (["Email bob@example.org", "Thanks for help"], "Email <EMAIL_ADDRESS>Thanks for help"),
    ],
)
def test_pii_split_across_text_parts(served, parts, expected):
    content = [{"type": "text", "text": p} for p in parts]
    body = _chat(served, [{"role": "user", "content": content}])
    joined = "".join(p["text"] for p in body["messages"][0]["content"])
    assert joined == expected


# 2. PII split across messages.
def test_pii_split_across_messages(served):
    messages = [
        {"role": "user", "content": "my address is john.doe"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "no wait, the address was jane.roe"},
        {"role": "user", "content": "@example.com, and the card 4111 1111"},
        {"role": "user", "content": "1111 1111 expires soon"},
    ]
    body = _chat(served, messages)
    contents = [m["content"] for m in body["messages"]]
    assert contents[0] == "my address is john.doe"  # "ok" follows it: nothing to join
    assert contents[2] == "no wait, the address was <EMAIL_ADDRESS>"
    assert contents[3] == ", and the card <CREDIT_CARD>"
    assert contents[4] == " expires soon"
    assert "jane.roe" not in _sent(served[1]) and "1111" not in _sent(served[1])


@pytest.mark.parametrize("opening", ["How do I reset my password?", "how do I reset my password?"])
def test_an_address_ending_a_message_leaves_the_next_message_whole(served, opening):
    """Glued at the seam, "...acme-corp.com." and "How" read as an address at the domain .how: the redaction took the
    next message's first word with it (a user trial, 2026-12-08)."""
    messages = [
        {"role": "system", "content": "Escalations go to jane.doe@acme-corp.com."},
        {"role": "user", "content": opening},
    ]
    contents = [m["content"] for m in _chat(served, messages)["messages"]]
    assert contents == ["Escalations go to <EMAIL_ADDRESS>.", opening]


def test_benign_multi_message_chat_goes_upstream_unchanged(served):
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": [{"type": "text", "text": "Version 4.1"}, {"type": "text", "text": "1 is out"}]},
        {"role": "user", "content": "Call it at 10"},
        {"role": "user", "content": "30 tomorrow."},
    ]
    body = _chat(served, messages, user="team-42", stop=["\n\n"])
    assert body["messages"] == messages and body["user"] == "team-42" and body["stop"] == ["\n\n"]


# 3. Obfuscations a model reads through.
def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("content", "expected", "hidden"),
    [
        ("mail john\u200b.doe@exam\u200cple.com today", "mail <EMAIL_ADDRESS> today", "example"),
        ("mail john.doe\uff20example.com today", "mail <EMAIL_ADDRESS> today", "example"),
        (
            "card " + " ".join(["\uff14\uff11\uff11\uff11"] + ["\uff11" * 4] * 3) + " ok",
            "card <CREDIT_CARD> ok",
            "1111",
        ),
        ("card 4111.1111.1111.1111 ok", "card <CREDIT_CARD> ok", "1111"),
        ("card 4111\u200b1111\u200b1111\u200b1111 ok", "card <CREDIT_CARD> ok", "1111"),
        (f"decode this: {_b64(EMAIL)} please", "decode this: <EMAIL_ADDRESS> please", _b64(EMAIL)),
        (f"decode: {_b64('my card is ' + CARD)}.", "decode: <CREDIT_CARD>.", _b64("my card is " + CARD)),
        (f"twice: {_b64(_b64(EMAIL))}", "twice: <EMAIL_ADDRESS>", _b64(_b64(EMAIL))),
        ("mail john.doe%40example.com today", "mail <EMAIL_ADDRESS> today", "example"),
        ("mail john.doe\\u0040example.com today", "mail <EMAIL_ADDRESS> today", "example"),
        (
            "mail john.doe&#64;example.com or john.doe&#x40;example.com",
            "mail <EMAIL_ADDRESS> or <EMAIL_ADDRESS>",
            "doe",
        ),
        ("open https://a.io/?to=john.doe%40example.com&x=1 now", "open <EMAIL_ADDRESS> now", "example"),
        ("card 4111%201111%201111%201111 ok", "card <CREDIT_CARD> ok", "1111"),
        ("mail john.doe at example dot com today", "mail <EMAIL_ADDRESS> today", "example"),
        ("mail john.doe [at] example [dot] co [dot] uk", "mail <EMAIL_ADDRESS>", "example"),
        ("mail john(at)example.org now", "mail <EMAIL_ADDRESS> now", "example"),
        ("write to mary dot smith at gmail dot com today", "write to <EMAIL_ADDRESS> today", "mary"),
        ("mail john dot doe at example.com now", "mail <EMAIL_ADDRESS> now", "john"),
        # the escaped letters decode to the name; "n@gmail.com" also matches as it stands
        ("mail \\u006a\\u006f\\u0068n@gmail.com now", "mail <EMAIL_ADDRESS> now", "006a"),
    ],
)
def test_obfuscated_pii_is_redacted(served, content, expected, hidden):
    body = _chat(served, [{"role": "user", "content": content}])
    assert body["messages"][0]["content"] == expected
    assert hidden not in _sent(served[1])


def test_escapes_without_pii_are_left_alone(served):
    content = "100% sure: a&b, caf&eacute; and path%2Fto%2Ffile with \\u00e9; I work at example.com, at 5.30"
    assert _chat(served, [{"role": "user", "content": content}])["messages"][0]["content"] == content


def test_base64_of_plain_text_is_left_alone(served):
    content = f"here is some base64: {_b64('hello world, nothing secret here')}"
    assert _chat(served, [{"role": "user", "content": content}])["messages"][0]["content"] == content


# 4. Fields that were never scanned.
def test_name_user_stop_tool_calls_and_tools_are_redacted(served):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "send_mail",
                "description": f"Sends mail; the default recipient is {EMAIL}.",
                "parameters": {
                    "type": "object",
                    "properties": {"to": {"type": "string", "description": "card on file: 4111 1111 1111 1111"}},
                },
            },
        }
    ]
    messages = [
        {"role": "user", "name": EMAIL, "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "send_mail", "arguments": json.dumps({"to": EMAIL, "card": CARD})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sent"},
    ]
    body = _chat(served, messages, tools=tools, user=EMAIL, stop=[CARD, "END"])
    assert body["messages"][0]["name"] == "<EMAIL_ADDRESS>"
    arguments = json.loads(body["messages"][1]["tool_calls"][0]["function"]["arguments"])
    assert arguments == {"to": "<EMAIL_ADDRESS>", "card": "<CREDIT_CARD>"}
    function = body["tools"][0]["function"]
    assert function["description"] == "Sends mail; the default recipient is <EMAIL_ADDRESS>."
    assert function["parameters"]["properties"]["to"]["description"] == "card on file: <CREDIT_CARD>"
    assert body["user"] == "<EMAIL_ADDRESS>" and body["stop"] == ["<CREDIT_CARD>", "END"]
    assert "john" not in _sent(served[1]) and "1111" not in _sent(served[1])


def test_completion_suffix_and_prompt_are_redacted(served):
    clients, upstream = served
    clients["strict"].completions.create(
        model="tiny", prompt="Dear john.doe", suffix="@example.com, your card 4111.1111.1111.1111", max_tokens=5
    )
    body = upstream.received[-1]
    assert body["prompt"] == "Dear <EMAIL_ADDRESS>" and body["suffix"] == ", your card <CREDIT_CARD>"


def test_pii_in_a_function_name_cannot_be_redacted_so_it_blocks(served):
    clients, upstream = served
    before = len(upstream.received)
    tools = [{"type": "function", "function": {"name": "4111111111111111", "parameters": {"type": "object"}}}]
    with pytest.raises(openai.BadRequestError) as error:
        clients["strict"].chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], tools=tools
        )
    assert error.value.code == "content_policy_violation" and "CREDIT_CARD" in str(error.value)
    assert len(upstream.received) == before


# 5. Logprobs carry the text they score.
def _assert_no_leak(tokens: list[str], alternatives: list[str]) -> None:
    for piece in LEAKS:
        assert not any(piece in t.lower() for t in tokens + alternatives), piece


def test_chat_logprobs_are_redacted_with_the_content(served):
    clients, _ = served
    response = clients["strict"].chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], logprobs=True, top_logprobs=2
    )
    choice = response.choices[0]
    assert choice.message.content == ANSWER_REDACTED
    entries = choice.logprobs.content
    assert "".join(e.token for e in entries) == ANSWER_REDACTED
    assert all(bytes(e.bytes).decode() == e.token for e in entries)
    _assert_no_leak([e.token for e in entries], [a.token for e in entries for a in e.top_logprobs])
    assert any(e.top_logprobs for e in entries)  # alternatives outside the PII stay


def test_completion_logprobs_are_redacted_with_the_text(served):
    clients, _ = served
    response = clients["strict"].completions.create(model="tiny", prompt="hi", logprobs=2, max_tokens=20)
    choice = response.choices[0]
    assert choice.text == ANSWER_REDACTED
    tokens = choice.logprobs.tokens
    assert "".join(tokens) == ANSWER_REDACTED
    assert choice.logprobs.text_offset == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
    _assert_no_leak(tokens, [a for top in choice.logprobs.top_logprobs for a in top])


def test_streamed_chat_logprobs_are_redacted_with_the_content(served):
    clients, _ = served
    stream = clients["strict"].chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], logprobs=True, top_logprobs=2, stream=True
    )
    text, tokens, alternatives = "", [], []
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for entry in (choice.logprobs.content or []) if choice.logprobs else []:
                tokens.append(entry.token)
                alternatives += [a.token for a in entry.top_logprobs]
    assert text == ANSWER_REDACTED and "".join(tokens) == ANSWER_REDACTED
    _assert_no_leak(tokens, alternatives)


def test_streamed_completion_logprobs_are_redacted_with_the_text(served):
    clients, _ = served
    stream = clients["strict"].completions.create(model="tiny", prompt="hi", logprobs=2, max_tokens=20, stream=True)
    text, tokens, alternatives, offsets = "", [], [], []
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.text or ""
            if choice.logprobs:
                tokens += choice.logprobs.tokens
                offsets += choice.logprobs.text_offset
                alternatives += [a for top in choice.logprobs.top_logprobs for a in top]
    assert text == ANSWER_REDACTED and "".join(tokens) == ANSWER_REDACTED
    assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
    _assert_no_leak(tokens, alternatives)


# 6. Names and street addresses in streams, arriving 1-3 characters at a time.
def test_streamed_names_are_redacted_and_never_leak_in_pieces(served):
    clients, upstream = served
    stream = clients["names"].chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], stream=True, extra_body={"fake": "names"}
    )
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert "".join(pieces) == NAME_REDACTED
    assert not any(part in piece for piece in pieces for part in ("Mar", "ria", "Gon", "lez", "2212", "Orc", "788"))
    response = clients["names"].chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], extra_body={"fake": "names"}
    )
    assert response.choices[0].message.content == NAME_REDACTED


def test_names_split_across_messages_are_redacted(served):
    clients, upstream = served
    messages = [{"role": "user", "content": "Please forward this to Maria"}, {"role": "user", "content": "Gonzalez"}]
    clients["names"].chat.completions.create(model="tiny", messages=messages, extra_body={"fake": "names"})
    assert "Maria" not in _sent(upstream) and "Gonzalez" not in _sent(upstream)
