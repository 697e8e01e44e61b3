"""A replica whose engine processes each step's outputs while the next step runs (async_output_processing, on by
default on CUDA), through the official client: streamed text equals the whole answer, stop strings end streams with
their reason, and concurrent streams all finish."""

from __future__ import annotations

import concurrent.futures

import pytest

from tests.engine.server.live import LiveServer, make_engine


@pytest.fixture(scope="module")
def live_server(tiny_model_dir) -> LiveServer:
    engine = make_engine(tiny_model_dir, async_output_processing=True)
    assert engine.overlap_outputs
    server = LiveServer(engine).start()
    yield server
    server.stop()


def _streamed(client, model: str, **kwargs) -> tuple[dict[int, str], dict[int, str | None]]:
    texts: dict[int, str] = {}
    reasons: dict[int, str | None] = {}
    for chunk in client.completions.create(model=model, stream=True, **kwargs):
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
            reasons[choice.index] = choice.finish_reason or reasons.get(choice.index)
    return texts, reasons


def test_streams_match_whole_answers_and_stop_strings_end_them(client, model):
    greedy = {"prompt": "def main():", "max_tokens": 24, "temperature": 0, "extra_body": {"ignore_eos": True}}
    whole = client.completions.create(model=model, **greedy).choices[0].text
    texts, reasons = _streamed(client, model, n=2, **greedy)
    assert texts == {0: whole, 1: whole} and reasons == {0: "length", 1: "length"}
    stop = whole[len(whole) // 2 : len(whole) // 2 + 2]
    cut = whole[: whole.index(stop)]
    texts, reasons = _streamed(client, model, stop=[stop], **greedy)
    assert texts == {0: cut} and reasons == {0: "stop"}
    assert client.completions.create(model=model, stop=[stop], **greedy).choices[0].text == cut


def test_concurrent_streams_all_finish(client, model):
    def one(i: int) -> tuple[dict[int, str], dict[int, str | None]]:
        return _streamed(client, model, prompt=f"item {i}:", max_tokens=5 + i, temperature=0.8, seed=i)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    assert all(reasons[0] in ("stop", "length") for _, reasons in results)
