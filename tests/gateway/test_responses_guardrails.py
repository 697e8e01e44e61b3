"""/v1/responses through the gateway's guardrails (official openai client -> gateway -> a loopback upstream that
echoes the last message): the input is redacted before the upstream sees it, the output is redacted whole and in the
streamed events, and an output block ends the stream with response.failed."""

from __future__ import annotations

import openai
import pytest

from tests.gateway.conftest import Admin, gateway_config, serve_gateway
from tests.gateway.echo_upstream import EchoUpstream
from tests.gateway.servers import ThreadServer

POLICIES = {
    "redact_in": {"pii_action": "redact"},
    "redact_out": {"pii_action": "detect", "output_pii_action": "redact"},
    "block_out": {"pii_action": "detect", "output_pii_action": "block"},
}
EMAIL = "li.chen@example.com"
PROMPT = f"write to {EMAIL} today"


@pytest.fixture(scope="module")
def clients(tokenizer_dir):
    upstream = EchoUpstream()
    with ThreadServer(upstream.app) as echo:
        config = gateway_config(
            [echo.url], tokenizer_dir, guardrails={"engine": {"pii_engine": "fast"}, "policies": POLICIES}
        )
        with serve_gateway(config) as server:
            admin = Admin(server.url)
            made = {}
            for name in POLICIES:
                key = admin.key(admin.tenant(guardrails=name))
                made[name] = openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=30)
            yield made
            for client in made.values():
                client.close()


def _streamed_text(client: openai.OpenAI) -> tuple[str, list]:
    events = list(client.responses.create(model="tiny", input=PROMPT, stream=True))
    return "".join(e.delta for e in events if e.type == "response.output_text.delta"), events


@pytest.mark.parametrize("policy", ["redact_in", "redact_out"])
def test_pii_is_redacted_whole_and_streamed(clients, policy):
    client = clients[policy]
    whole = client.responses.create(model="tiny", input=PROMPT)
    assert whole.status == "completed" and whole.output_text.startswith("write to ")
    assert EMAIL not in whole.output_text and "today" in whole.output_text
    text, events = _streamed_text(client)
    assert EMAIL not in text and "today" in text
    assert events[-1].type == "response.completed" and events[-1].response.output_text == text


def test_an_address_split_over_two_text_parts_is_redacted_before_the_upstream(clients):
    client = clients["redact_in"]
    parts = [{"type": "input_text", "text": "mail li.chen"}, {"type": "input_text", "text": "@example.com"}]
    answer = client.responses.create(model="tiny", input=[{"role": "user", "content": parts}])
    # The echo answers with the last message as the upstream received it: the address split over two parts too.
    assert answer.output_text.startswith("mail ") and EMAIL not in answer.output_text


def test_an_output_block_fails_the_response(clients):
    client = clients["block_out"]
    with pytest.raises(openai.BadRequestError) as blocked:
        client.responses.create(model="tiny", input=PROMPT)
    assert blocked.value.code == "content_policy_violation"
    text, events = _streamed_text(client)
    assert EMAIL not in text
    assert events[-1].type == "response.failed"
    assert events[-1].response.error.code == "content_policy_violation"
