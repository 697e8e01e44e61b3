"""The replica through the official openai client (sync and async) on a real server with the tiny model."""

from __future__ import annotations

import asyncio

import httpx
import openai

from tests.engine.server.live import LiveServer, make_engine


def test_models_lists_the_served_model(client, live_server):
    models = client.models.list().data
    assert [m.id for m in models] == [live_server.llm_engine.model_name]
    assert models[0].object == "model"


def test_completion_shape_and_usage(client, model):
    response = client.completions.create(model=model, prompt="def main():", max_tokens=5, temperature=0)
    assert response.id.startswith("cmpl-") and response.object == "text_completion" and response.model == model
    assert response.created > 0
    choice = response.choices[0]
    assert choice.index == 0 and choice.finish_reason in ("stop", "length") and isinstance(choice.text, str)
    usage = response.usage
    assert usage.completion_tokens <= 5 and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens >= 0


def test_chat_completion_shape(client, model):
    response = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello"}], max_completion_tokens=6, temperature=0
    )
    assert response.id.startswith("chatcmpl-") and response.object == "chat.completion"
    message = response.choices[0].message
    assert message.role == "assistant" and isinstance(message.content, str)
    assert response.usage.completion_tokens >= 1


def test_chat_prompt_tokens_match_tokenize_endpoint(client, model, live_server):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    counted = httpx.post(live_server.url + "/tokenize", json={"messages": messages}).json()
    response = client.chat.completions.create(model=model, messages=messages, max_tokens=1)
    assert response.usage.prompt_tokens == counted["count"] > 10


def test_n2_returns_two_indexed_choices(client, model):
    response = client.completions.create(model=model, prompt="x = ", max_tokens=4, n=2, seed=7, temperature=1.0)
    assert sorted(c.index for c in response.choices) == [0, 1]
    assert 2 <= response.usage.completion_tokens <= 8


def test_seed_makes_sampling_reproducible(client, model):
    def sample(seed: int) -> str:
        return client.completions.create(
            model=model, prompt="import os\n", max_tokens=12, temperature=1.0, seed=seed,
            extra_body={"ignore_eos": True},
        ).choices[0].text  # fmt: skip

    first = sample(123)
    assert sample(123) == first
    assert any(sample(s) != first for s in (1, 2, 3))


def test_stop_string_cuts_the_text(client, model):
    full = (
        client.completions.create(
            model=model, prompt="for i in", max_tokens=16, temperature=0, extra_body={"ignore_eos": True}
        )
        .choices[0]
        .text
    )
    # A two-character stop string whose first occurrence is past the start of the text.
    stop = next(full[i : i + 2] for i in range(3, len(full) - 2) if full.index(full[i : i + 2]) >= 3)
    cut = client.completions.create(model=model, prompt="for i in", max_tokens=16, temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == full[: full.index(stop)]


def test_stream_completion_chunks_and_usage(client, model):
    chunks = list(
        client.completions.create(
            model=model, prompt="class A:", max_tokens=8, n=2, stream=True, temperature=0,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
        )
    )  # fmt: skip
    body, last = chunks[:-1], chunks[-1]
    assert all(len(c.choices) == 1 and c.usage is None for c in body)
    assert {c.choices[0].index for c in body} == {0, 1}
    assert last.choices == [] and last.usage.completion_tokens == 16
    finishes = [c.choices[0] for c in body if c.choices[0].finish_reason]
    assert sorted(c.index for c in finishes) == [0, 1] and all(c.finish_reason == "length" for c in finishes)
    whole = client.completions.create(
        model=model, prompt="class A:", max_tokens=8, temperature=0, extra_body={"ignore_eos": True}
    )
    assert "".join(c.choices[0].text for c in body if c.choices[0].index == 0) == whole.choices[0].text


def test_stream_chat_role_first_then_content_then_finish(client, model):
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    chunks = list(stream)
    assert chunks[0].object == "chat.completion.chunk" and chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].usage is None
    assert all(c.id == chunks[0].id for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks)


def test_completion_logprobs_format(client, model):
    choice = client.completions.create(
        model=model, prompt="def", max_tokens=4, logprobs=2, temperature=0, extra_body={"ignore_eos": True}
    ).choices[0]
    lp = choice.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 4
    assert all(len(top) <= 2 for top in lp.top_logprobs) and all(x <= 0 for x in lp.token_logprobs)
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)


def test_chat_logprobs_format(client, model):
    choice = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=3, logprobs=True, top_logprobs=2,
        temperature=0, extra_body={"ignore_eos": True},
    ).choices[0]  # fmt: skip
    content = choice.logprobs.content
    assert len(content) == 3
    for entry in content:
        assert isinstance(entry.token, str) and entry.logprob <= 0 and isinstance(entry.bytes, list)
        assert 1 <= len(entry.top_logprobs) <= 2
    assert b"".join(bytes(e.bytes) for e in content).decode("utf-8", "replace").startswith(choice.message.content[:1])


def test_list_of_prompts_and_token_ids(client, model):
    response = client.completions.create(model=model, prompt=["a", "b", "c"], max_tokens=2, n=2)
    assert sorted(c.index for c in response.choices) == list(range(6))
    ids = client.completions.create(model=model, prompt=[[5, 6, 7], [8, 9]], max_tokens=2)
    assert len(ids.choices) == 2 and ids.usage.prompt_tokens == 5


def test_cache_salt_and_prefix_hits_in_usage(client, model):
    prompt = list(range(20, 60))  # 2 full blocks of 16 tokens
    client.completions.create(model=model, prompt=prompt, max_tokens=1)
    again = client.completions.create(model=model, prompt=prompt, max_tokens=1)
    assert again.usage.prompt_tokens_details.cached_tokens == 32
    salted = client.completions.create(model=model, prompt=prompt, max_tokens=1, extra_body={"cache_salt": "t9"})
    assert salted.usage.prompt_tokens_details.cached_tokens == 0


def test_max_tokens_defaults_to_16_for_completions_and_the_context_for_chat(tiny_model_dir):
    """OpenAI's and vLLM's defaults."""
    server = LiveServer(make_engine(tiny_model_dir, max_model_len=64)).start()
    try:
        body = {"prompt": list(range(10, 20)), "ignore_eos": True}
        completion = server.http.post("/v1/completions", json=body).json()
        assert completion["usage"]["completion_tokens"] == 16 and completion["choices"][0]["finish_reason"] == "length"
        body = {"messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
        usage = server.http.post("/v1/chat/completions", json=body).json()["usage"]
        assert usage["total_tokens"] == 64 and usage["completion_tokens"] > 16
    finally:
        server.stop()


def test_request_id_echoed_and_traceparent_accepted(live_server):
    headers = {"x-request-id": "req-abc", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    response = httpx.post(live_server.url + "/v1/completions", json={"prompt": "a", "max_tokens": 1}, headers=headers)
    assert response.status_code == 200 and response.headers["x-request-id"] == "req-abc"
    assert httpx.get(live_server.url + "/health").headers["x-request-id"]


def test_tokenize_detokenize_round_trip(live_server):
    tokens = httpx.post(live_server.url + "/tokenize", json={"prompt": "print('hi')"}).json()["tokens"]
    assert httpx.post(live_server.url + "/detokenize", json={"tokens": tokens}).json()["prompt"] == "print('hi')"


async def test_many_concurrent_async_clients(live_server, model):
    async with openai.AsyncOpenAI(base_url=live_server.url + "/v1", api_key="unused", max_retries=0) as client:

        async def one(i: int) -> tuple[int, int]:
            if i % 2:
                stream = await client.completions.create(
                    model=model, prompt=f"x{i} =", max_tokens=6, stream=True, stream_options={"include_usage": True},
                    extra_body={"ignore_eos": True},
                )  # fmt: skip
                usage = [c.usage async for c in stream][-1]
                return i, usage.completion_tokens
            response = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": f"q{i}"}], max_tokens=6,
                extra_body={"ignore_eos": True},
            )  # fmt: skip
            return i, response.usage.completion_tokens

        results = await asyncio.gather(*(one(i) for i in range(40)))
    assert sorted(results) == [(i, 6) for i in range(40)]
