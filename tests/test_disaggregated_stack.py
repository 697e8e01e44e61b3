"""The whole disaggregated path, real parts only: the official openai client -> a gateway on the prefix router -> a
prefill replica (it computes the prompt and holds its KV blocks) -> a decode replica (it reads them over NIXL and
streams the answer). The answer is the one a single replica gives; the decode replica really read the blocks."""

from __future__ import annotations

import openai
import pytest

from tests.engine.server.live import LiveServer, make_engine
from tests.gateway.conftest import Admin, gateway_config, serve_gateway, wait_until

LONG = "Disaggregated serving moves the prompt's KV blocks from one replica to another. " * 4


@pytest.fixture(scope="module")
def replicas(tiny_model_dir):
    servers = [
        LiveServer(make_engine(tiny_model_dir, served_model_name="tiny", kv_role=role)).start()
        for role in ("prefill", "decode", "both")
    ]
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def stack(replicas, tiny_model_dir):
    prefill, decode, _ = replicas
    config = gateway_config([], tiny_model_dir, router="gateway.routing.factory:build_router", debug_headers=True)
    config["models"]["tiny"]["replicas"] = [
        {"name": "p0", "url": prefill.url, "role": "prefill"},
        {"name": "d0", "url": decode.url, "role": "decode"},
    ]
    config["models"]["tiny"]["prefill_min_prompt_tokens"] = 64
    with serve_gateway(config) as gw:
        admin = Admin(gw.url)
        key = admin.key(admin.tenant())
        yield gw, openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=60)


@pytest.mark.parametrize("stream", [False, True])
def test_a_long_prompt_is_prefilled_on_one_replica_and_decoded_on_the_other(replicas, stack, stream):
    prefill, decode, colocated = replicas
    _, client = stack
    messages = [{"role": "user", "content": LONG + ("streamed" if stream else "whole")}]
    request = {"model": "tiny", "messages": messages, "max_tokens": 16, "temperature": 0}
    expected = openai.OpenAI(base_url=colocated.url + "/v1", api_key="-").chat.completions.create(**request)
    moved_before = moved(decode)

    raw = client.chat.completions.with_raw_response.create(**request, stream=stream)
    if stream:
        text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    else:
        text = raw.parse().choices[0].message.content
    assert text == expected.choices[0].message.content
    assert raw.headers["x-sluicegate-replica"] == "d0" and raw.headers["x-sluicegate-prefill-replica"] == "p0"
    # Every handed block was read, or found in the decode replica's cache (the two prompts share a prefix).
    assert moved(decode) - moved_before == (expected.usage.prompt_tokens - 1) // 16
    wait_until(lambda: prefill.metric("sluicegate_engine_kv_handoffs_held") == 0)


def moved(decode: LiveServer) -> float:
    return decode.metric("sluicegate_engine_kv_blocks_read_total") + decode.metric(
        "sluicegate_engine_kv_blocks_already_cached_total"
    )


def test_a_short_prompt_goes_to_the_decode_replica_alone(replicas, stack):
    prefill, decode, _ = replicas
    _, client = stack
    handoffs_before = prefill.metric("sluicegate_engine_kv_handoffs_total")
    raw = client.chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": "Hi!"}], max_tokens=4, temperature=0
    )
    assert raw.headers["x-sluicegate-replica"] == "d0" and "x-sluicegate-prefill-replica" not in raw.headers
    assert prefill.metric("sluicegate_engine_kv_handoffs_total") == handoffs_before
