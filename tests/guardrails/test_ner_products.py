"""Software, services and formats are not names (guardrails/ner/products.py): a developer's prompt keeps "Excel",
"Safari" and "Matplotlib", on the fast path and the full Presidio path alike, while the people, places and companies
beside them are still redacted."""

import pytest

from guardrails import GuardrailPolicy
from guardrails.ner.products import inside_product_name, product_names

NAMES = GuardrailPolicy(pii_entities=("PERSON", "LOCATION", "ORGANIZATION"), pii_action="redact")

DEVELOPER_PROMPTS = [
    "Convert the JSON to CSV in Excel.",
    "How do I center a div in Chrome and Safari?",
    "Is Java faster than Kotlin for Android apps?",
    "Why is Jupyter slow when I plot with Matplotlib?",
    "Configure Nginx as a reverse proxy for Django.",
    "Deploy the app to Heroku from GitHub Actions.",
    "Translate this into Spanish the way Google Translate does.",
]


@pytest.mark.parametrize("text", DEVELOPER_PROMPTS)
def test_product_names_pass_unredacted(guardrails_engine, presidio_engine, text):
    for engine in (guardrails_engine, presidio_engine):
        assert engine.check_input([text], NAMES).texts == (text,), text


def test_names_beside_products_are_still_redacted(guardrails_engine):
    verdict = guardrails_engine.check_input(["Send the Excel file to Maria Schmidt at Google in Zurich."], NAMES)
    assert verdict.texts == ("Send the Excel file to <PERSON> at <ORGANIZATION> in <LOCATION>.",)


def test_a_span_counts_as_a_product_only_inside_a_listed_name():
    assert {"Excel", "Google Docs", "Microsoft Excel"} <= product_names()
    text = "Open it in Google Docs, then ask Google."
    assert inside_product_name(text, text.index("Google"), text.index("Google") + 6)  # "Google" of "Google Docs"
    last = text.rindex("Google")
    assert not inside_product_name(text, last, last + 6)  # the company alone
    assert not inside_product_name("Taylor Swift sang", 0, len("Taylor Swift"))
