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


class _Pieces:
    """Stands in for the decode stream: each step yields the next piece of text (None: an unfinished character)."""

    def __init__(self, pieces):
        self._pieces = iter(pieces)

    def step(self, tokenizer, token_id):
        return next(self._pieces)


def _fed(tokenizer, stops: list[str], pieces: list[str | None]) -> IncrementalDetokenizer:
    detok = IncrementalDetokenizer(tokenizer, [0], stop=stops, skip_special_tokens=True)
    detok._stream = _Pieces(pieces)
    return detok


def test_hold_back_is_the_longest_suffix_that_starts_a_stop_string(tokenizer):
    """Stop matches and the hold-back, computed from each new piece alone, agree with a search of the whole text:
    the earliest match that ends in the new piece (checks on), cut there; else the longest suffix of the text that
    is a proper prefix of a stop string."""
    import random

    rng = random.Random(0)
    for _ in range(2000):
        stops = ["".join(rng.choice("ab") for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 3))]
        pieces = [None if rng.random() < 0.2 else "".join(rng.choice("abc") for _ in range(rng.randint(1, 4)))
                  for _ in range(rng.randint(1, 8))]  # fmt: skip
        detok = _fed(tokenizer, stops, pieces)
        text = ""
        for i, piece in enumerate(pieces):
            check_stop = rng.random() < 0.7
            found = detok.append(i, check_stop=check_stop)
            if piece is not None:
                old_len, text = len(text), text + piece
                hits = [(text.find(s, max(0, old_len - len(s) + 1)), s) for s in stops]
                hits = [(at, -stops.index(s), s) for at, s in hits if at != -1 and check_stop]
                if hits:
                    at, _, stop = min(hits, key=lambda h: (h[0], -h[1]))
                    assert (found, detok.text) == (stop, text[:at]), (stops, pieces)
                    break
            assert found is None and detok.text == text, (stops, pieces)
            naive = max([k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])], default=0)
            assert detok._held_back_chars() == naive, (stops, pieces)


def test_long_stop_strings_hold_back_only_a_possible_start_of_one(tokenizer):
    """The server allows 64 stop strings of 4096 characters. Each one's partial match is followed piece by piece
    (rescanning the tail for each cost ~0.2 s a token with a text of 'a's; now microseconds): only the last 'a',
    which could start 'ab...', is held back."""
    stops = ["ab" * 2040 + f"{i:016d}" for i in range(64)]
    pieces = ["a" * 4096] + ["a"] * 50
    detok = _fed(tokenizer, stops, pieces)
    for i in range(len(pieces)):
        assert detok.append(i) is None
        assert detok.take_delta(final=False) == ("a" * 4095 if i == 0 else "a")


@pytest.mark.parametrize("num_prompt_tokens", range(1, 13))
def test_prompt_ending_inside_a_character_puts_only_output_text_in_the_output(tokenizer, num_prompt_tokens):
    """A token-id prompt can end (or its decode window start) inside a multi-byte character. The output is
    decode(prompt + output) less the prompt's whole characters: the character the output finishes, no prompt text
    and no replacement characters."""
    ids = tokenizer.encode("ab 世界🎉x", add_special_tokens=False).ids  # the CJK and emoji characters are byte tokens
    assert len(ids) == 13
    prompt, output = ids[:num_prompt_tokens], ids[num_prompt_tokens:]
    detok = IncrementalDetokenizer(tokenizer, prompt, stop=[], skip_special_tokens=True)
    deltas = []
    for token_id in output:
        detok.append(token_id)
        deltas.append(detok.take_delta(final=False))
    deltas.append(detok.take_delta(final=True))
    prompt_chars = tokenizer.decode(prompt).rstrip("\ufffd")
    assert "".join(deltas) == detok.text == tokenizer.decode(ids).removeprefix(prompt_chars)
    assert all("\ufffd" not in d for d in deltas)


@pytest.mark.parametrize("prompt_text", ["ab 世", "ab \ufffd", "x \ufffd\ufffd\ufffd\ufffd"])
def test_prompt_bytes_the_output_does_not_finish_stay_out_of_the_output(tokenizer, prompt_text):
    """Unfinished prompt bytes (the first byte of 世) and literal U+FFFD characters at the prompt's end decode as
    replacement characters; they are prompt text, so the output starts with the output's own text."""
    prompt = tokenizer.encode(prompt_text, add_special_tokens=False).ids
    if prompt_text == "ab 世":
        prompt = prompt[:-2]
    detok = IncrementalDetokenizer(tokenizer, prompt, stop=[], skip_special_tokens=True)
    for token_id in tokenizer.encode("dx", add_special_tokens=False).ids:
        detok.append(token_id)
    assert detok.take_delta(final=True) == detok.text == "dx"


@pytest.mark.parametrize(("output_ids", "text"), [([2, 3], "世d"), ([3], "d")])
def test_prompt_token_holding_a_space_and_half_a_character_gives_no_space(output_ids, text):
    """Byte-level BPE vocabularies have tokens like ' ' + the first byte of a character. A prompt ending in one
    decodes as ' \ufffd': the space is prompt text even though the character it starts is the output's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    ((byte_chars, _),) = pre_tokenizers.ByteLevel(add_prefix_space=False).pre_tokenize_str(" 世")  # a char per byte
    vocab = {"ab": 0, byte_chars[:2]: 1, byte_chars[2:]: 2, "d": 3}  # 1: ' ' + 0xE4; 2: 0xB8 0x96, the rest of 世
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="ab"))
    tokenizer.decoder = decoders.ByteLevel()
    detok = IncrementalDetokenizer(tokenizer, [0, 1], stop=[], skip_special_tokens=True)
    for token_id in output_ids:
        detok.append(token_id)
    assert detok.take_delta(final=True) == detok.text == text
