"""logit_bias through the official openai client on a live replica: a +100 bias makes a token win every greedy step,
-100 makes it lose, and malformed or out-of-vocabulary biases are a 400 naming the field."""

from __future__ import annotations

import httpx
import openai
import pytest

PROMPT = "def main():"


def _token_id(live_server, text: str) -> int:
    tokens = httpx.post(live_server.url + "/tokenize", json={"prompt": text, "add_special_tokens": False}).json()[
        "tokens"
    ]
    assert len(tokens) == 1, tokens
    return tokens[0]


def _complete(client, model, max_tokens: int, **extra) -> str:
    return (
        client.completions.create(model=model, prompt=PROMPT, max_tokens=max_tokens, temperature=0, **extra)
        .choices[0]
        .text
    )


def test_positive_bias_forces_the_token(client, model, live_server):
    token = _token_id(live_server, "x")
    assert _complete(client, model, 6, logit_bias={str(token): 100}) == "x" * 6


def test_negative_bias_outweighs_a_positive_one(client, model, live_server):
    x, y = _token_id(live_server, "x"), _token_id(live_server, "y")
    assert _complete(client, model, 4, logit_bias={str(x): 100, str(y): 90}) == "xxxx"
    assert _complete(client, model, 4, logit_bias={str(x): -100, str(y): 90}) == "yyyy"


def test_bias_applies_to_chat_and_sampled_rows(client, model, live_server):
    token = _token_id(live_server, "x")
    reply = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "hi"}],
        max_completion_tokens=4,
        temperature=1.0,
        seed=3,
        logit_bias={str(token): 100},
    )
    assert reply.choices[0].message.content == "x" * 4


@pytest.mark.parametrize(
    "bias", [{"1": 101}, {"1": -100.5}, {"abc": 1}, {"-1": 1}, {"1": "high"}, {str(i): 1 for i in range(301)}]
)
def test_malformed_bias_is_a_400_naming_the_field(client, model, bias):
    with pytest.raises(openai.BadRequestError) as caught:
        _complete(client, model, 1, logit_bias=bias)
    assert caught.value.body["param"] == "logit_bias"


def test_token_outside_the_vocabulary_is_a_400(client, model, live_server):
    vocab_size = live_server.llm_engine.spec.vocab_size
    with pytest.raises(openai.BadRequestError) as caught:
        _complete(client, model, 1, logit_bias={str(vocab_size): 5})
    assert caught.value.body["param"] == "logit_bias" and str(vocab_size) in caught.value.body["message"]
