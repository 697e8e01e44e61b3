"""The pieces behind the bypass fixes (issue 15), on their own: normalization offsets, base64 runs, the request's
fields, the joined prompt's mapping, logprobs redaction and the stream's hold-back of names."""

from __future__ import annotations

import base64
import random

import pytest

from guardrails import GuardrailPolicy
from guardrails.encoded import encoded_runs
from guardrails.findings import Finding
from guardrails.logprobs import StreamLogprobs, redact_choice
from guardrails.normalize import normalize
from guardrails.prompt_view import PromptView, Segment
from guardrails.request_fields import request_fields

REDACT = GuardrailPolicy(pii_action="redact", output_pii_action="redact")
NAMES = GuardrailPolicy(
    pii_entities=("EMAIL_ADDRESS", "PERSON", "LOCATION", "ORGANIZATION"), output_pii_action="redact"
)


@pytest.mark.parametrize(
    "original",
    [
        "mail jo\u200bhn@example.com now",
        "mail john\uff20example.com now",
        "mail \ufb01le@example.com now",  # a ligature: one character becomes two
        "tag \U000e006a\U000e006f@example.com now",  # tag characters: invisible ASCII
        "\u200b\u200b\u200bjohn@example.com",
    ],
)
def test_normalized_spans_map_back_to_the_original(original):
    normalized = normalize(original)
    assert "@example.com" in normalized.text and "\u200b" not in normalized.text
    start = normalized.text.index("@example.com")
    local_start = normalized.text.rindex(" ", 0, start) + 1 if " " in normalized.text[:start] else 0
    end = start + len("@example.com")
    span = original[normalized.original_start(local_start) : normalized.original_end(end)]
    assert span.endswith("example.com") and "now" not in span and "mail" not in span


def test_ascii_text_is_not_copied():
    text = "plain ascii text"
    normalized = normalize(text)
    assert normalized.text is text and normalized.unchanged and normalized.original_end(5) == 5


def test_encoded_runs_decode_plausible_base64_only():
    secret = base64.b64encode(b"write to john.doe@example.com").decode()
    text = f"x {secret} internationalization supercalifragilistic Zm9vYmFy {'Q' + secret}"
    decoded = [run.decoded for run in encoded_runs(text)]
    assert decoded == ["write to john.doe@example.com", "write to john.doe@example.com"]  # junk prefix skipped too


def test_request_fields_units_and_identifiers():
    body = {
        "messages": [
            {"role": "user", "name": "n", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
        ],
        "tools": [{"type": "function", "function": {"name": "g", "description": "d", "parameters": {"x": ["e"]}}}],
        "user": "u",
        "stop": "s",
    }
    fields = request_fields("chat", body)
    by_path = {path: segment for segment, path in fields}
    parts = by_path[("messages", 0, "content", 0, "text")], by_path[("messages", 0, "content", 1, "text")]
    assert parts[0].unit == parts[1].unit != by_path[("messages", 0, "name")].unit
    assert parts[0].untrusted and not by_path[("messages", 1, "tool_calls", 0, "function", "arguments")].untrusted
    assert not by_path[("tools", 0, "function", "name")].redactable
    assert by_path[("tools", 0, "function", "parameters", "x", 0)].text == "e"
    assert {("user",), ("stop",), ("tools", 0, "function", "description")} <= set(by_path)
    assert [s.text for s, _ in request_fields("completions", {"prompt": ["p", [1, 2]], "suffix": "x"})] == ["p", "x"]


def test_an_assistant_turns_refusal_is_scanned_as_the_model_reads_it():
    """A replayed refusal (the field, or refusal parts beside text parts) reaches the model: scanned like content."""
    body = {
        "messages": [
            {"role": "assistant", "content": None, "refusal": "mail jane.doe@example.com"},
            {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "b"}]},
        ]
    }
    by_path = {path: segment for segment, path in request_fields("chat", body)}
    assert by_path[("messages", 0, "refusal")].text == "mail jane.doe@example.com"
    parts = by_path[("messages", 1, "content", 0, "text")], by_path[("messages", 1, "content", 1, "refusal")]
    assert parts[0].unit == parts[1].unit and parts[1].text == "b"


def test_a_finding_across_segments_has_one_placeholder(guardrails_engine):
    segments = [Segment("mail jo", 0), Segment("hn@exa", 0), Segment("mple.com ok", 0)]
    found = PromptView(segments).scan(guardrails_engine.scanner, REDACT)
    assert [[(f.start, f.end, f.continuation) for f in per] for per in found] == [
        [(5, 7, False)],
        [(0, 6, True)],
        [(0, 8, True)],
    ]
    verdict = guardrails_engine.check_segments(segments, REDACT)
    assert verdict.texts == ("mail <EMAIL_ADDRESS>", "", " ok") and verdict.entity_counts() == {"EMAIL_ADDRESS": 1}


def test_check_input_texts_are_units_with_seams(guardrails_engine):
    verdict = guardrails_engine.check_input(["call me: john", ".doe@example.com"], REDACT)
    assert verdict.texts == ("call me: <EMAIL_ADDRESS>", "")


def _chat_entry(token: str) -> dict:
    return {"token": token, "logprob": -1.0, "bytes": list(token.encode()), "top_logprobs": [{"token": token}]}


def test_whole_response_logprobs_that_do_not_spell_the_text_are_dropped():
    choice = {"logprobs": {"content": [_chat_entry("a"), _chat_entry("b")]}}
    redact_choice("chat", choice, "a@b.example", [Finding("EMAIL_ADDRESS", 0, 11, 1.0)], "placeholder")
    assert choice["logprobs"] is None


def test_stream_logprobs_wait_for_their_text_and_mask():
    logprobs = StreamLogprobs("chat", "mask")
    logprobs.add({"content": [_chat_entry("hi "), _chat_entry("jo")]}, "hi jo")
    first = logprobs.release(3, [], final=False)
    assert [e["token"] for e in first["content"]] == ["hi "]
    logprobs.add({"content": [_chat_entry("e@x"), _chat_entry(".io")]}, "e@x.io!")  # does not spell its delta
    last = logprobs.release(10, [Finding("EMAIL_ADDRESS", 3, 9, 1.0)], final=True)
    tokens = [e["token"] for e in last["content"]]
    assert tokens == ["**", "***", "***"] and all(e["top_logprobs"] == [] for e in last["content"])


def _stream(engine, chunks, policy):
    redactor = engine.stream_redactor(policy)
    emitted = [redactor.feed(chunk) for chunk in chunks]
    for _ in emitted:
        assert redactor.held_chars <= engine.config.stream_max_holdback_chars
    return emitted + [redactor.finish()]


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        (
            "Thanks! I have forwarded your note to Maria Gonzalez, who will call you tomorrow. Bye.",
            ("Mar", "Gon", "lez"),
        ),
        ("Maria Gonzalez will call you tomorrow morning about it.", ("Mar", "Gon", "lez")),
        ("Ask Dr. Jonathan Richardson.\nHe knows.", ("Jon", "Ric", "son")),
        # Street addresses grow after they are first recognised: house number first, postcode and town last.
        ("Ship it to 2212 Orchard Way, Delhi, WA 78878. Let me know if you need anything.", ("2212", "Orc", "788")),
        ("Bitte an Martina Kealoha, Orchardring 49, 93468 Munich. Let me know if needed.", ("Orc", "934", "Mun")),
        (
            "Cher Kevin, votre colis est au 4 quai de la Chestnut, 37781 Palma. Let me know soon.",
            ("Chestnut", "377", "Palma"),
        ),
    ],
)
def test_a_streamed_name_or_address_in_random_small_chunks_never_leaks(guardrails_engine, text, pieces):
    whole = guardrails_engine.redact_output(text, NAMES)
    assert not any(piece in whole for piece in pieces)
    rng = random.Random(5)
    for _ in range(10):
        chunks, i = [], 0
        while i < len(text):
            chunks.append(text[i : i + rng.randint(1, 3)])
            i += len(chunks[-1])
        emitted = _stream(guardrails_engine, chunks, NAMES)
        assert "".join(emitted) == whole


@pytest.mark.parametrize(
    "text",
    [
        "mail jo\u200bhn@exa\u200bmple.com now",
        "mail john\uff20example.com now",
        f"mail {base64.b64encode(b'john@example.com').decode()} now",
    ],
)
def test_obfuscated_output_is_redacted_whole_and_streamed(guardrails_engine, text):
    policy = GuardrailPolicy(output_pii_action="redact")
    assert guardrails_engine.redact_output(text, policy) == "mail <EMAIL_ADDRESS> now"
    assert "".join(_stream(guardrails_engine, list(text), policy)) == "mail <EMAIL_ADDRESS> now"
