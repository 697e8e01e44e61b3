import socket

import pytest

from guardrails import GuardrailPolicy
from guardrails.findings import Finding, redact, resolve_overlaps
from tests.guardrails.pii_values import VALUES

REDACT = GuardrailPolicy(pii_action="redact")


@pytest.mark.parametrize("entity, value", VALUES, ids=[f"{e}-{i}" for i, (e, _) in enumerate(VALUES)])
def test_each_entity_is_found_with_its_exact_span(guardrails_engine, entity, value):
    text = f"Here it is: {value}. Thanks!"
    findings = guardrails_engine.scanner.scan(text, REDACT)
    assert [(f.entity, text[f.start : f.end]) for f in findings] == [(entity, value)]
    verdict = guardrails_engine.check_input([text], REDACT)
    assert verdict.action == "redact"
    assert verdict.texts == (f"Here it is: <{entity}>. Thanks!",)


@pytest.mark.parametrize("entity, value", VALUES, ids=[f"{e}-{i}" for i, (e, _) in enumerate(VALUES)])
def test_fast_path_finds_what_presidio_finds(guardrails_engine, presidio_engine, entity, value):
    text = f"Note for the file, ref 12: {value} (please keep safe)"
    fast = {(f.entity, f.start, f.end) for f in guardrails_engine.scanner.scan(text, REDACT)}
    full = {(f.entity, f.start, f.end) for f in presidio_engine.scanner.scan(text, REDACT)}
    assert full <= fast


def test_mask_style_keeps_length_and_layout(guardrails_engine):
    policy = GuardrailPolicy(pii_action="redact", redaction_style="mask")
    text = "mail maria.garcia+news@example.co.uk or card 4111 1111 1111 1111 now"
    (redacted,) = guardrails_engine.check_input([text], policy).texts
    assert redacted == "mail " + "*" * 31 + " or card " + "*" * 19 + " now"


def test_benign_text_has_no_findings(guardrails_engine):
    texts = [
        "Summarise the Q3 report in 5 bullet points and keep it under 200 words.",
        "Python 3.11.7 was released in 2023; run pip install numpy==1.26.4 first.",
        "Meet me at 10:30 in room 4B on the 2nd floor, order #5521.",
        "The risk-averse task-force asked for the password policy document.",
    ]
    for text in texts:
        assert guardrails_engine.scanner.scan(text, REDACT) == [], text


def test_thresholds_and_context_words(guardrails_engine, presidio_engine):
    strict = GuardrailPolicy(pii_action="redact", pii_thresholds={"PHONE_NUMBER": 0.7})
    bare = "reach 212-555-0187 today"
    with_context = "my phone number is 212-555-0187 today"
    for engine in (guardrails_engine, presidio_engine):
        assert engine.scanner.scan(bare, strict) == []
        (finding,) = engine.scanner.scan(with_context, strict)
        assert finding.entity == "PHONE_NUMBER" and finding.score >= 0.7


def test_only_policy_entities_are_reported(guardrails_engine):
    policy = GuardrailPolicy(pii_entities=("CREDIT_CARD",), pii_action="redact")
    text = "mail a.b@example.com card 4111 1111 1111 1111"
    assert [f.entity for f in guardrails_engine.scanner.scan(text, policy)] == ["CREDIT_CARD"]


def test_multibyte_text_keeps_offsets(guardrails_engine):
    text = "Привет 👋🏽 — 山田さん, пишите на ivan.petrov@example.ru или 📞 +44 20 7946 0958 ✅"
    (redacted,) = guardrails_engine.check_input([text], REDACT).texts
    assert redacted == "Привет 👋🏽 — 山田さん, пишите на <EMAIL_ADDRESS> или 📞 <PHONE_NUMBER> ✅"


def test_scanning_never_touches_the_network(guardrails_engine, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("guardrails tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    text = "write to someone@brand-new-domain.example.org or admin@example.com"
    found = guardrails_engine.scanner.scan(text, REDACT)
    assert [text[f.start : f.end] for f in found] == ["someone@brand-new-domain.example.org", "admin@example.com"]


def test_secrets_without_digits_or_in_words_are_not_keys(guardrails_engine):
    policy = GuardrailPolicy(pii_entities=("API_KEY", "JWT"), pii_action="redact")
    for text in [
        "password: correcthorsebatterystaple",
        "a risk-assessment-for-the-whole-team-2024 plan",
        "eyJhbGciOi.notajwt.atall",
    ]:
        assert guardrails_engine.scanner.scan(text, policy) == [], text
    (finding,) = guardrails_engine.scanner.scan('api_key = "Zx81kq0Pw2ls9dMn4"', policy)
    assert finding.entity == "API_KEY"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("DATABASE_URL=postgres://admin:S3cr3tPass@db.internal:5432/app", "postgres://admin:<API_KEY>@db.internal"),
        ("redis://default:x9Kq2mPz7@cache:6379/0 and amqp://guest:guest@mq", "redis://default:<API_KEY>@cache"),
        ("password=Hunter2Secret! and more", "password=<API_KEY> and more"),
    ],
)
def test_passwords_in_connection_strings_and_assignments(guardrails_engine, text, expected):
    """The password of a URL (not its user), and an assigned password with its punctuation (a "!" was left over)."""
    policy = GuardrailPolicy(pii_entities=("API_KEY",), pii_action="redact")
    assert expected in guardrails_engine.check_input([text], policy).texts[0]


def test_spanish_national_phone_numbers_are_found_and_zip_codes_are_not(guardrails_engine):
    policy = GuardrailPolicy(pii_action="redact")
    text = "Llámame al 91 123 45 67 o al 612 34 56 78 (móvil 612345678); zip 78712-1179."
    assert guardrails_engine.check_input([text], policy).texts == (
        "Llámame al <PHONE_NUMBER> o al <PHONE_NUMBER> (móvil <PHONE_NUMBER>); zip 78712-1179.",
    )


@pytest.mark.parametrize("card", ["3056 9309 0259 04", "3056-9309-0259-04", "3056.9309.0259.04"])
def test_a_diners_card_in_its_usual_grouping_is_found(guardrails_engine, card):
    policy = GuardrailPolicy(pii_action="redact")
    assert guardrails_engine.check_input([f"card {card} ok"], policy).texts == ("card <CREDIT_CARD> ok",)
    assert guardrails_engine.check_input(["ref 3056 9309 0259 05 ok"], policy).texts == ("ref 3056 9309 0259 05 ok",)


def test_overlaps_keep_the_strongest_finding():
    findings = [
        Finding("PHONE_NUMBER", 5, 16, 0.4),
        Finding("US_SSN", 5, 16, 0.85),
        Finding("URL", 20, 25, 0.5),
        Finding("EMAIL_ADDRESS", 18, 30, 1.0),
    ]
    kept = resolve_overlaps(findings)
    assert [(f.entity, f.start) for f in kept] == [("US_SSN", 5), ("EMAIL_ADDRESS", 18)]
    assert redact("x" * 40, kept, "placeholder") == "xxxxx<US_SSN>xx<EMAIL_ADDRESS>xxxxxxxxxx"


def test_fast_path_matches_presidio_beyond_the_defaults(guardrails_engine, presidio_engine):
    entities = tuple(sorted(guardrails_engine.scanner.supported_entities))
    policy = GuardrailPolicy(pii_entities=entities, pii_action="redact", pii_default_threshold=0.3)
    text = (
        "mac ab:cd:ef:ab:cd:ef id 550e8400-e29b-41d4-a716-446655440000 see www.example.com on 2024-01-05, "
        "NHS 943 476 5919, ITIN 912-91-1234, routing via account 12345678901 and ssn 219-09-9999"
    )
    fast = {(f.entity, f.start, f.end) for f in guardrails_engine.scanner.scan(text, policy)}
    full = {(f.entity, f.start, f.end) for f in presidio_engine.scanner.scan(text, policy)}
    assert {"MAC_ADDRESS", "UUID", "URL", "DATE_TIME"} <= {entity for entity, _, _ in fast}
    assert full <= fast


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Open /contacts?email=john.doe@example.com in the app", "Open /contacts?email=<EMAIL_ADDRESS> in the app"),
        ("GET /api/users/john.doe@example.com HTTP/1.1", "GET /api/users/<EMAIL_ADDRESS> HTTP/1.1"),
        ("list: alice@example.com/bob@example.com", "list: <EMAIL_ADDRESS>/<EMAIL_ADDRESS>"),
        ("mailto:o'brien+tag@sub.example.co.uk.", "mailto:<EMAIL_ADDRESS>."),
        ("a@b and x@localhost are not addresses", "a@b and x@localhost are not addresses"),
    ],
)
def test_emails_inside_paths_and_queries_are_found(guardrails_engine, text, expected):
    """Presidio's pattern takes `/ ? = :` into the local part, and its domain check then reads the match as a URL
    and drops it: the address leaked."""
    assert redact(text, guardrails_engine.scanner.scan(text, REDACT), REDACT.redaction_style) == expected


def test_plus_phone_survives_a_low_scored_neighbour(guardrails_engine, presidio_engine):
    """The zip code scores below the threshold, which runs the context enhancer; it used to drop the `+` number
    because the number came from a matcher the enhancer did not know."""
    text = "Call me on +44 20 7946 0958, zip 98052-6399."
    for engine in (guardrails_engine, presidio_engine):
        (redacted,) = engine.check_input([text], REDACT).texts
        assert redacted == "Call me on <PHONE_NUMBER>, zip 98052-6399.", engine.config.pii_engine


@pytest.mark.parametrize(
    "phone",
    [
        "+41 (0)96 471 07 95",  # Swiss, trunk prefix in brackets, outside the allocated ranges
        "+41 44 668 18 00",  # Swiss
        "+49 30 901820",  # German, Berlin
        "+49 (0)30 12345678",  # German, trunk prefix in brackets
        "+33 1 42 68 53 00",  # French
        "+33 6 12 34 56 78",  # French mobile
        "+44 7700 900123",  # UK mobile (Ofcom drama range)
        "+44 (0)20 7946 0958",  # UK, trunk prefix in brackets
        "+91 98765 43210",  # Indian mobile
        "+55 11 91234-5678",  # Brazilian mobile
        "+55 (21) 2555-1234",  # Brazilian landline
    ],
)
def test_international_phone_numbers(guardrails_engine, phone):
    text = f"Reach our office on {phone} during the day, reference 5521."
    findings = guardrails_engine.scanner.scan(text, REDACT)
    assert [(f.entity, text[f.start : f.end]) for f in findings] == [("PHONE_NUMBER", phone)]


@pytest.mark.parametrize(
    "text",
    [
        "The office is at zip 98052-6399 and postcode SW1A 1AA.",
        "Paris 75008, Berlin 10115, Madrid 28014, London EC1A 1BB.",
        "Order 2024-11-03 shipped in 3 boxes of 12.",
    ],
)
def test_postcodes_and_dates_are_not_phone_numbers(guardrails_engine, text):
    assert [f for f in guardrails_engine.scanner.scan(text, REDACT) if f.entity == "PHONE_NUMBER"] == [], text


@pytest.mark.parametrize(
    "iban", ["de89370400440532013000", "gb82 west 1234 5698 7654 32", "Fr14 2004 1010 0505 0001 3M02 606"]
)
def test_ibans_in_any_case(guardrails_engine, presidio_engine, iban):
    text = f"Please wire it to {iban} by Friday."
    for engine in (guardrails_engine, presidio_engine):
        findings = engine.scanner.scan(text, REDACT)
        assert [(f.entity, text[f.start : f.end]) for f in findings] == [("IBAN_CODE", iban)], engine.config.pii_engine


def test_a_lower_case_word_with_a_bad_checksum_is_not_an_iban(guardrails_engine):
    assert guardrails_engine.scanner.scan("ab12 cdef ghij klmn opqr st", REDACT) == []
