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


def test_text_from_before_stop_checks_began_never_stops_the_request(tokenizer):
    """Under min_tokens stop checks start late; a stop string already written (and streamed) then must not match,
    however long the other stop strings are."""
    ids = tokenizer.encode(" x = ab; y = 1; z = 2", add_special_tokens=False).ids
    for stops in (["ab"], ["ab", "a much longer stop string"]):
        detok = IncrementalDetokenizer(tokenizer, [0], stop=stops, skip_special_tokens=True)
        streamed = ""
        for i, token_id in enumerate(ids):
            assert detok.append(token_id, check_stop=i >= len(ids) - 2) is None
            streamed += detok.take_delta(final=False)
        streamed += detok.take_delta(final=True)
        assert streamed == detok.text == " x = ab; y = 1; z = 2"


def test_hold_back_is_the_longest_suffix_that_starts_a_stop_string(tokenizer):
    import random

    rng = random.Random(0)
    for _ in range(2000):
        stops = ["".join(rng.choice("ab") for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 3))]
        detok = IncrementalDetokenizer(tokenizer, [0], stop=stops, skip_special_tokens=True)
        detok.text = "".join(rng.choice("abc") for _ in range(rng.randint(0, 12)))
        naive = max([k for s in stops for k in range(1, len(s)) if detok.text.endswith(s[:k])], default=0)
        assert detok._held_back_chars() == naive, (stops, detok.text)
