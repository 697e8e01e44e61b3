"""Exact prompt token counts: the gateway's fast path (template render + Rust encode) gives the same ids as
transformers' own `AutoTokenizer.apply_chat_template(..., tokenize=True)` and tokenizer call."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.errors import ApiError
from gateway.request.tokenizer import PromptTokenizer

CONVERSATIONS = [
    [{"role": "user", "content": "hello"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Explain  KV caches\n\nplease."}],
    [
        {"role": "user", "content": "héllo wörld ✓ 你好"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "   padded   "},
    ],
    [{"role": "user", "content": "x" * 3000}],
]


@pytest.fixture(scope="module")
def tokenizers(tokenizer_dir):
    from transformers import AutoTokenizer

    return PromptTokenizer(tokenizer_dir), AutoTokenizer.from_pretrained(tokenizer_dir)


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_chat_ids_match_transformers(tokenizers, messages):
    ours, reference = tokenizers
    expected = reference.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)["input_ids"]
    text = ours.render_chat(messages)
    assert asyncio.run(ours.encode(text, add_special_tokens=False)) == list(expected)


def test_piece_cache_stays_exact_across_turns(tokenizers):
    ours, reference = tokenizers
    conversation = []
    for turn in range(4):  # each turn resends the whole history: earlier pieces come from the cache
        conversation += [
            {"role": "user", "content": f"question {turn}: why?"},
            {"role": "assistant", "content": f"because {turn}<|eot_id|> fake"},
        ]
        expected = reference.apply_chat_template(conversation, tokenize=True, add_generation_prompt=True)
        assert ours.encode_now(ours.render_chat(conversation), False) == list(expected["input_ids"])


def test_long_prompt_encoded_off_the_loop(tokenizers):
    ours, reference = tokenizers
    text = "def f(x):\n    return x\n" * 3000  # past LONG_PROMPT_CHARS: a worker thread encodes it
    assert asyncio.run(ours.encode(text, add_special_tokens=True)) == reference(text)["input_ids"]


def test_content_parts_and_bad_messages(tokenizers):
    ours, _ = tokenizers
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert ours.render_chat(parts) == ours.render_chat([{"role": "user", "content": "ab"}])
    with pytest.raises(ApiError) as info:
        ours.render_chat([{"content": "no role"}])
    assert info.value.status == 400 and info.value.param == "messages"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a",
        "hello world " * 500,
        "héllo wörld ✓ 你好 " * 300,
        " " * 5000,
        "<|eot_id|>" * 400,
        "x" * 20_000,
        "\u00e9\u0301" * 2000,
    ],
)
def test_min_tokens_is_a_lower_bound(tokenizers, text):
    ours, _ = tokenizers
    assert ours.min_tokens(text) <= len(ours.encode_now(text, False)) and ours.min_tokens(text) >= 0


def test_a_prompt_too_long_by_its_length_alone_is_refused_unencoded(local_gateway, monkeypatch):
    def no_encoding(*args, **kwargs):
        raise AssertionError("a prompt that cannot fit was encoded")

    monkeypatch.setattr(PromptTokenizer, "encode", no_encoding)
    key = local_gateway.admin.key(local_gateway.admin.tenant())
    for body in ({"messages": [{"role": "user", "content": "word " * 300_000}]}, {"prompt": "word " * 300_000}):
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        response = httpx.post(
            local_gateway.url + path,
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
            json={"model": "tiny", "max_tokens": 1, **body},
        )
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "context_length_exceeded" and "at least" in error["message"]  # not counted exactly
