"""/v1/completions logprobs on the tiny model's real tokenizer: offsets index the text the client gets (special
tokens are listed but left out of it), and tokens that read the same keep the likeliest's logprob."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from engine.outputs import TokenLogprob
from engine.server.formats import CompletionFormat
from engine.server.tokenization import Tokenization


@pytest.fixture(scope="module")
def tokenization(tiny_model_dir) -> Tokenization:
    tokenization = Tokenization(AutoTokenizer.from_pretrained(tiny_model_dir))
    yield tokenization
    tokenization.close()


def test_special_tokens_take_no_characters_of_the_text(tokenization):
    special = min(tokenization.special_ids)
    word = next(i for i in range(tokenization.vocab_size) if tokenization.token_text(i).strip().isalpha())
    entries = [TokenLogprob(word, -0.1), TokenLogprob(special, -0.2), TokenLogprob(word, -0.3)]
    logprobs = CompletionFormat(tokenization).logprobs(entries, 0)
    width = len(tokenization.token_text(word))
    assert logprobs["tokens"][1] == tokenization.token_text(special) != ""  # listed, as OpenAI lists it
    assert logprobs["text_offset"] == [0, width, width]


def test_tokens_that_read_the_same_keep_the_likeliest(tokenization):
    # byte-level tokens that hold part of a UTF-8 character all read "\ufffd"
    partial = [i for i in range(tokenization.vocab_size) if tokenization.token_text(i) == "\ufffd"][:3]
    assert len(partial) == 3
    entry = TokenLogprob(partial[0], -0.5, top=[(partial[0], -0.5), (partial[1], -1.5), (partial[2], -2.5)])
    assert CompletionFormat(tokenization).logprobs([entry], 0)["top_logprobs"] == [{"\ufffd": -0.5}]


def test_offsets_stay_inside_the_text_through_the_server(client, model):
    """logit_bias forces a special token: the text is empty, so every offset is 0."""
    choice = client.completions.create(
        model=model, prompt="once", max_tokens=3, logprobs=1, logit_bias={"3": 100}, temperature=0
    ).choices[0]
    assert choice.text == "" and choice.logprobs.text_offset == [0, 0, 0]
