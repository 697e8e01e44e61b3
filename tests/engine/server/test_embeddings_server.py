"""/v1/embeddings on a live replica through the official openai client (which asks for base64 by default and
decodes it): shapes, usage, the four input forms agreeing, float and base64 agreeing, `dimensions`, and 400s."""

from __future__ import annotations

import math

import httpx
import openai
import pytest


def _tokens(live_server, text: str) -> list[int]:
    return httpx.post(live_server.url + "/tokenize", json={"prompt": text}).json()["tokens"]


def test_one_string_gives_one_unit_vector_and_usage(client, model, live_server):
    response = client.embeddings.create(model=model, input="The quick brown fox")
    assert response.object == "list" and response.model == model and len(response.data) == 1
    item = response.data[0]
    assert item.object == "embedding" and item.index == 0
    assert len(item.embedding) == live_server.llm_engine.spec.hidden_size
    assert math.isclose(sum(x * x for x in item.embedding), 1.0, rel_tol=1e-4)
    tokens = len(_tokens(live_server, "The quick brown fox"))
    assert response.usage.prompt_tokens == tokens and response.usage.total_tokens == tokens


def test_input_forms_agree(client, model, live_server):
    texts = ["first input", "a second, longer input with more words in it"]
    by_text = client.embeddings.create(model=model, input=texts, encoding_format="float").data
    ids = [_tokens(live_server, t) for t in texts]
    by_ids = client.embeddings.create(model=model, input=ids, encoding_format="float").data
    single_ids = client.embeddings.create(model=model, input=ids[1], encoding_format="float").data
    as_base64 = client.embeddings.create(model=model, input=texts).data  # the client's default: base64, decoded
    assert [d.index for d in by_text] == [0, 1]
    for a, b, c in zip(by_text, by_ids, as_base64):
        assert a.embedding == pytest.approx(b.embedding, abs=1e-6)
        assert a.embedding == pytest.approx(c.embedding, abs=1e-6)
    assert single_ids[0].embedding == pytest.approx(by_text[1].embedding, abs=1e-6)
    assert by_text[0].embedding != pytest.approx(by_text[1].embedding, abs=1e-3)


def test_dimensions_cut_and_renormalize(client, model):
    full = client.embeddings.create(model=model, input="shorter please", encoding_format="float").data[0].embedding
    cut = client.embeddings.create(model=model, input="shorter please", dimensions=8).data[0].embedding
    assert len(cut) == 8 and math.isclose(sum(x * x for x in cut), 1.0, rel_tol=1e-4)
    norm = math.sqrt(sum(x * x for x in full[:8]))
    assert cut == pytest.approx([x / norm for x in full[:8]], abs=1e-5)


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": [[]]}, "input"),
        ({"input": "hi", "dimensions": 100_000}, "dimensions"),
        ({"input": "hi", "dimensions": 0}, "dimensions"),
        ({"input": "hi", "encoding_format": "int8"}, "encoding_format"),
        ({"input": [10**9]}, "input[0]"),
    ],
)
def test_bad_requests_are_400s_naming_the_field(client, model, extra, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model=model, **extra)
    assert caught.value.body["param"] == param


def test_an_input_longer_than_the_context_is_a_400(client, model, live_server):
    too_long = [5] * (live_server.llm_engine.max_model_len + 1)
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=model, input=too_long)


def test_an_unknown_model_is_a_404(client):
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="no-such-model", input="hi")


def test_more_inputs_than_the_replica_admits_at_once_go_in_waves(client, model, live_server):
    engine = live_server.llm_engine
    count = engine.config.max_num_seqs + live_server.app.state.replica.engine.max_waiting_requests + 5
    texts = [f"input number {i}" for i in range(count)]
    data = client.embeddings.create(model=model, input=texts, encoding_format="float").data
    assert [d.index for d in data] == list(range(count))
    alone = client.embeddings.create(model=model, input=texts[-1], encoding_format="float").data[0].embedding
    assert data[-1].embedding == pytest.approx(alone, abs=1e-6)
