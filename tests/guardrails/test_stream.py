import random

import pytest

from guardrails import GuardrailPolicy, Guardrails, GuardrailsConfig, OutputBlocked
from tests.guardrails.pii_values import PRIVATE_KEY

REDACT = GuardrailPolicy(output_pii_action="redact")
TEXT = (
    "Sure! Write to jane.roe@example.org, or pay with 4111 1111 1111 1111 — call +1 (415) 555-0132 "
    "before 5pm. ünïcødé ✓ done."
)
EXPECTED = "Sure! Write to <EMAIL_ADDRESS>, or pay with <CREDIT_CARD> — call <PHONE_NUMBER> before 5pm. ünïcødé ✓ done."


def _stream(engine, chunks, policy=REDACT):
    redactor = engine.stream_redactor(policy, "acme")
    emitted = []
    for chunk in chunks:
        emitted.append(redactor.feed(chunk))
        assert redactor.held_chars <= engine.config.stream_max_holdback_chars
    emitted.append(redactor.finish())
    return "".join(emitted), emitted


def test_whole_text_matches_non_streamed(guardrails_engine):
    assert guardrails_engine.redact_output(TEXT, REDACT) == EXPECTED
    assert _stream(guardrails_engine, [TEXT])[0] == EXPECTED


def test_one_character_per_chunk(guardrails_engine):
    assert _stream(guardrails_engine, list(TEXT))[0] == EXPECTED


def test_every_two_chunk_split(guardrails_engine):
    for cut in range(1, len(TEXT)):
        assert _stream(guardrails_engine, [TEXT[:cut], TEXT[cut:]])[0] == EXPECTED, cut


def _random_chunks(text: str, rng: random.Random, max_chars: int) -> list[str]:
    chunks, i = [], 0
    while i < len(text):
        size = rng.randint(1, max_chars)
        chunks.append(text[i : i + size])
        i += size
    return chunks


def test_random_chunkings(guardrails_engine):
    rng = random.Random(7)
    for _ in range(15):
        assert _stream(guardrails_engine, _random_chunks(TEXT, rng, 9))[0] == EXPECTED


@pytest.mark.parametrize(
    "text",
    [
        "Write to john dot doe at gmail dot com please.",
        "Write to john [at] example [dot] com please.",
        "mary dot smith at gmail dot com",
        "It is a test of what is at stake, dot by dot.",
    ],
)
def test_a_spelled_out_address_streams_as_it_is_redacted_whole(guardrails_engine, text):
    """It spans spaces: held as a chain of labels and spelled marks, it never goes out in part (it once went out as
    "john dot doe at gmail dot <EMAIL_ADDRESS>"), and ordinary text with "at" and "dot" streams unchanged."""
    whole = guardrails_engine.redact_output(text, REDACT)
    rng = random.Random(11)
    for _ in range(20):
        chunks = _random_chunks(text, rng, 3)
        assert _stream(guardrails_engine, chunks)[0] == whole, chunks
    assert ("<EMAIL_ADDRESS>" in whole) == ("stake" not in text)


def test_holds_back_only_the_possible_entity(guardrails_engine):
    """The last word, and the word before a space too: "is " may still become "is at example dot com"."""
    redactor = guardrails_engine.stream_redactor(REDACT)
    assert redactor.feed("Hello there, my mail is ") == "Hello there, my mail "
    assert redactor.feed("jane.roe") == "is "
    assert redactor.feed("@exam") == ""
    assert redactor.feed("ple.org and more") == "<EMAIL_ADDRESS> and "
    assert redactor.finish() == "more"


def test_digits_are_held_while_a_card_could_grow(guardrails_engine):
    redactor = guardrails_engine.stream_redactor(REDACT)
    assert redactor.feed("card 4111 ") == "card "
    assert redactor.feed("1111 1111 ") == ""
    assert redactor.feed("1111 thanks") == "<CREDIT_CARD> "


def test_long_unbroken_run_is_released_bounded(guardrails_engine):
    limit = guardrails_engine.config.stream_max_holdback_chars
    redactor = guardrails_engine.stream_redactor(REDACT)
    out = "".join(redactor.feed("x") for _ in range(limit * 3))
    assert len(out) == limit * 2 and redactor.held_chars == limit
    assert out + redactor.finish() == "x" * limit * 3


def test_mask_style_stream(guardrails_engine):
    policy = GuardrailPolicy(output_pii_action="redact", redaction_style="mask")
    out, _ = _stream(guardrails_engine, list("ip 192.168.10.25 ok"), policy)
    assert out == "ip " + "*" * len("192.168.10.25") + " ok"


def test_block_mid_stream_sends_nothing_of_the_value(guardrails_engine):
    policy = GuardrailPolicy(output_pii_action="block")
    redactor = guardrails_engine.stream_redactor(policy)
    sent = []
    with pytest.raises(OutputBlocked) as error:
        for char in TEXT:
            sent.append(redactor.feed(char))
    assert error.value.entities == ("EMAIL_ADDRESS",) and redactor.blocked
    assert "jane" not in "".join(sent) and "".join(sent) == "Sure! Write to "
    with pytest.raises(OutputBlocked):
        redactor.feed("more")


def test_detect_passes_text_through_and_counts(metered):
    engine, registry = metered
    out, _ = _stream(engine, list(TEXT), GuardrailPolicy(output_pii_action="detect"))
    assert out == TEXT
    labels = {"tenant": "acme", "direction": "output", "entity": "CREDIT_CARD", "action": "detect"}
    assert registry.get_sample_value("sluicegate_guardrail_findings_total", labels) == 1.0


def test_off_is_a_pass_through(guardrails_engine):
    redactor = guardrails_engine.stream_redactor(GuardrailPolicy())
    assert redactor.feed("mail a@b.com") == "mail a@b.com" and redactor.finish() == ""


def test_private_key_longer_than_the_window_is_swallowed(guardrails_engine):
    text = f"Here is the key:\n{PRIVATE_KEY}\nKeep it safe, mail ops@example.com."
    out, _ = _stream(guardrails_engine, list(text))
    assert out == "Here is the key:\n<PRIVATE_KEY>\nKeep it safe, mail <EMAIL_ADDRESS>."


@pytest.mark.parametrize("chunk_chars", range(1, 40))
def test_text_after_a_private_key_survives_every_chunk_size(guardrails_engine, chunk_chars):
    """The swallowed key keeps the tail that may start its END line; a short pending text must be kept whole."""
    text = f"Contact: {PRIVATE_KEY} now. And more text after it."
    out, _ = _stream(guardrails_engine, [text[i : i + chunk_chars] for i in range(0, len(text), chunk_chars)])
    assert out == "Contact: <PRIVATE_KEY> now. And more text after it."


def test_small_window_config_is_honoured():
    engine = Guardrails(GuardrailsConfig(stream_max_holdback_chars=32, stream_context_chars=0))
    out, _ = _stream(engine, list(TEXT))
    assert out == EXPECTED


def _long_jwt() -> str:
    import base64
    import json

    def part(obj) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    claims = {"sub": "1234567890", "scope": "read write admin " * 6, "iat": 1700000000}
    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(claims)}.{'s1GnAtUrE' * 5}"


@pytest.mark.parametrize("style, expected_secret", [("placeholder", "<JWT>"), ("mask", None)])
def test_secret_longer_than_the_window_is_swallowed(guardrails_engine, style, expected_secret):
    token = _long_jwt()
    assert len(token) > 2 * guardrails_engine.config.stream_max_holdback_chars
    text = f"Use Authorization: Bearer {token} then call again."
    policy = GuardrailPolicy(output_pii_action="redact", redaction_style=style)
    for size in (1, 5):
        out, _ = _stream(guardrails_engine, [text[i : i + size] for i in range(0, len(text), size)], policy)
        secret = expected_secret or "*" * len(token)
        assert out == f"Use Authorization: Bearer {secret} then call again.", size


def test_long_key_by_prefix_is_swallowed_before_it_matches(guardrails_engine):
    key = "sk-proj-" + "Ab3De6Gh9Jk2Mn5Pq8St1Vw4Yz7" * 6
    out, _ = _stream(guardrails_engine, list(f"key={key}\nok"))
    assert out == "key=<API_KEY>\nok"


@pytest.mark.parametrize("chunk_chars", [1, 3, 16])
def test_a_swallowed_secret_ends_where_its_characters_end(guardrails_engine, chunk_chars):
    """Punctuation and quotes right after a long JWT are text, not secret: JSON output keeps its structure."""
    text = f'{{"token":"{_long_jwt()}","next":1}}; done'
    policy = GuardrailPolicy(output_pii_action="redact")
    out, _ = _stream(guardrails_engine, [text[i : i + chunk_chars] for i in range(0, len(text), chunk_chars)], policy)
    assert out == '{"token":"<JWT>","next":1}; done'


def test_long_plain_run_is_released_in_clear(guardrails_engine):
    url = "https://docs.example.com/" + "section/" * 30 + "index.html"
    out, _ = _stream(guardrails_engine, list(f"see {url} for more"))
    assert out == f"see {url} for more"


def test_an_email_at_the_end_of_a_url_longer_than_the_hold_back(guardrails_engine):
    text = (
        "See https://example.com/a/very/long/path/segment/that/keeps/going/and/going/for/a/while/index.html"
        "?contact=john.doe@example.com for details."
    )
    expected = text.replace("john.doe@example.com", "<EMAIL_ADDRESS>")
    assert guardrails_engine.redact_output(text, REDACT) == expected
    assert _stream(guardrails_engine, list(text))[0] == expected


NAMES = GuardrailPolicy(
    pii_entities=("EMAIL_ADDRESS", "PERSON", "LOCATION", "ORGANIZATION"), output_pii_action="redact"
)
NAME_TEXT = "Thanks! I have forwarded your note to Maria Gonzalez, who will call you tomorrow. Bye."
NAME_EXPECTED = "Thanks! I have forwarded your note to <PERSON>, who will call you tomorrow. Bye."


def _chunked(text: str, sizes) -> list[str]:
    chunks, i = [], 0
    for size in sizes:
        if i >= len(text):
            break
        chunks.append(text[i : i + size])
        i += size
    return chunks + ([text[i:]] if i < len(text) else [])


def test_whole_text_name_redaction(guardrails_engine):
    assert guardrails_engine.redact_output(NAME_TEXT, NAMES) == NAME_EXPECTED


@pytest.mark.parametrize("chunk_chars", [1, 2, 3])
def test_a_name_split_into_small_chunks_never_leaks(guardrails_engine, chunk_chars):
    out, emitted = _stream(guardrails_engine, _chunked(NAME_TEXT, [chunk_chars] * len(NAME_TEXT)), NAMES)
    assert out == NAME_EXPECTED
    assert not any(part in piece for piece in emitted for part in ("Mar", "Gon", "ria", "lez"))


def test_random_small_chunkings_of_a_name(guardrails_engine):
    rng = random.Random(11)
    for _ in range(20):
        chunks = _chunked(NAME_TEXT, [rng.randint(1, 3) for _ in NAME_TEXT])
        assert _stream(guardrails_engine, chunks, NAMES)[0] == NAME_EXPECTED


def test_a_name_is_held_until_two_words_follow(guardrails_engine):
    redactor = guardrails_engine.stream_redactor(NAMES)
    assert redactor.feed("I think you should ask ") == "I think you should "  # "ask " may start a spelled address
    assert redactor.feed("Maria ") == "ask "
    assert redactor.feed("Gonzalez ") == ""
    assert redactor.feed("to call ") == ""
    assert redactor.feed("back soon.") == "<PERSON> to call back "
    assert redactor.finish() == "soon."


LOWER_NAME_TEXT = "ok, can you tell sarah kowalski about the invoice before friday?"
LOWER_NAME_EXPECTED = "ok, can you tell <PERSON> about the invoice before friday?"


def test_a_lower_case_name_is_redacted_whole_and_in_small_chunks(guardrails_engine):
    assert guardrails_engine.redact_output(LOWER_NAME_TEXT, NAMES) == LOWER_NAME_EXPECTED
    rng = random.Random(5)
    for _ in range(10):
        chunks = _chunked(LOWER_NAME_TEXT, [rng.randint(1, 3) for _ in LOWER_NAME_TEXT])
        out, emitted = _stream(guardrails_engine, chunks, NAMES)
        assert out == LOWER_NAME_EXPECTED
        assert not any(part in piece for piece in emitted for part in ("sar", "rah", "kow", "ski"))


def test_everyday_lower_case_words_that_are_also_names_are_left_alone(guardrails_engine):
    text = "i will mark it done, hope that helps; set max tokens to 100 and grant the bill a review"
    assert guardrails_engine.redact_output(text, NAMES) == text
    assert _stream(guardrails_engine, list(text), NAMES)[0] == text


def test_the_hold_back_stays_bounded_with_names(guardrails_engine):
    """Text made of capitalized words only (a title list) never lets the name tail grow past the bound."""
    limit = guardrails_engine.config.stream_max_holdback_chars
    text = " ".join(["Alpha Beta Gamma Delta Epsilon Zeta Eta Theta Iota Kappa"] * 12)
    redactor = guardrails_engine.stream_redactor(NAMES)
    for char in text:
        redactor.feed(char)
        assert redactor.held_chars <= limit
    redactor.finish()


def test_names_are_not_held_when_the_policy_has_no_names(guardrails_engine):
    redactor = guardrails_engine.stream_redactor(REDACT)
    assert (
        redactor.feed("Ask Maria Gonzalez ") == "Ask Maria "
    )  # only the last word, which a spelled address could grow from


@pytest.mark.parametrize(
    "escaped", ["jane.roe%40example.org", "jane.roe\\u0040example.org", "jane.roe&#64;example.org"]
)
def test_escaped_addresses_never_leak_from_a_stream(guardrails_engine, escaped):
    text = f"Write to {escaped} today."
    for size in (1, 2, 3):
        out, _ = _stream(guardrails_engine, [text[i : i + size] for i in range(0, len(text), size)])
        assert out == "Write to <EMAIL_ADDRESS> today.", size
