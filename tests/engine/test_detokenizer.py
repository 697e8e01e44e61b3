"""Incremental detokenization never emits half a UTF-8 character and never emits text a stop string takes back."""

from __future__ import annotations

import pytest

from engine.detokenizer import IncrementalDetokenizer


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir).backend_tokenizer


@pytest.mark.parametrize("text", ["héllo wörld — ünïcödé ✓ 日本語テキスト 🚀🚀 done", "plain ascii text here"])
def test_streamed_deltas_are_whole_characters_and_add_up(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    detok = IncrementalDetokenizer(tokenizer, [0], stop=[], skip_special_tokens=True)
    deltas = []
    for token_id in ids:
        assert detok.append(token_id) is None
        deltas.append(detok.take_delta(final=False))
    deltas.append(detok.take_delta(final=True))
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)


def test_stop_string_prefix_is_held_back_until_resolved(tokenizer):
    text = "alpha beta STOP gamma"
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    detok = IncrementalDetokenizer(tokenizer, [0], stop=["STOP"], skip_special_tokens=True)
    emitted = ""
    stop = None
    for token_id in ids:
        stop = detok.append(token_id)
        emitted += detok.take_delta(final=stop is not None)
        assert "S" not in emitted, "a possible start of the stop string was emitted"
        if stop:
            break
    assert stop == "STOP" and emitted == "alpha beta " and detok.text == "alpha beta "


def test_false_alarm_prefix_is_released(tokenizer):
    ids = tokenizer.encode("x STAR y", add_special_tokens=False).ids
    detok = IncrementalDetokenizer(tokenizer, [0], stop=["STOP"], skip_special_tokens=True)
    emitted = "".join(detok.append(t) or detok.take_delta(final=False) for t in ids)
    emitted += detok.take_delta(final=True)
    assert emitted == "x STAR y"
