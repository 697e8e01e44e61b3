"""Sampling: seeded requests are reproducible alone and inside a busy batch; the truncation rules (top-k, top-p,
min-p), penalties, min_tokens, stop strings and stop tokens, and logprobs behave as specified."""

from __future__ import annotations

import math

import pytest
import torch

from engine import LLM, SamplingParams
from engine.errors import ContextLengthError, RequestError, RequestTooLargeError
from engine.sampler import Sampler, SamplingRow


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(tiny_model_dir, max_num_seqs=32)


def test_seeded_sampling_same_alone_and_in_a_busy_batch(llm):
    prompt = list(range(20, 60))
    seeded = SamplingParams(temperature=0.9, top_p=0.95, seed=1234, max_tokens=20, ignore_eos=True)
    alone = llm.generate([prompt], seeded)[0].outputs[0].token_ids
    noise = [list(range(30 + i, 70 + 3 * i)) for i in range(12)]
    busy_params = [SamplingParams(temperature=1.0, max_tokens=10 + i, ignore_eos=True) for i in range(12)]
    batch = llm.generate(noise[:6] + [prompt] + noise[6:], busy_params[:6] + [seeded] + busy_params[6:])
    assert batch[6].outputs[0].token_ids == alone
    # A different seed gives a different continuation (the seed is actually used).
    other = SamplingParams(temperature=0.9, top_p=0.95, seed=99, max_tokens=20, ignore_eos=True)
    assert llm.generate([prompt], other)[0].outputs[0].token_ids != alone


def _rows(params: SamplingParams, n: int) -> list[SamplingRow]:
    return [SamplingRow(params, torch.Generator().manual_seed(i), [], []) for i in range(n)]


def test_top_k_top_p_min_p_restrict_the_support():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.07, 0.03]])).repeat(400, 1)
    sampler = Sampler(torch.device("cpu"), seed=0)
    cases = [
        (SamplingParams(temperature=1.0, top_k=2), {0, 1}),
        (SamplingParams(temperature=1.0, top_p=0.7), {0, 1}),  # 0.5 + 0.25 crosses 0.7
        (SamplingParams(temperature=1.0, min_p=0.4), {0, 1}),  # 0.25 >= 0.4 * 0.5, 0.15 is not
        (SamplingParams(temperature=1.0), {0, 1, 2, 3, 4}),
    ]
    for params, support in cases:
        tokens = set(sampler(logits.clone(), _rows(params, 400)).token_ids)
        assert tokens == support, (params, tokens)


def test_sampling_follows_the_distribution():
    probs = torch.tensor([0.6, 0.3, 0.1])
    logits = torch.log(probs).repeat(6000, 1)
    sampler = Sampler(torch.device("cpu"), seed=0)
    tokens = torch.tensor(sampler(logits, [SamplingRow(SamplingParams(temperature=1.0), None, [], [])] * 6000).token_ids)
    freq = torch.bincount(tokens, minlength=3).float() / 6000
    assert torch.allclose(freq, probs, atol=0.03), freq


def test_penalties_discourage_repeats():
    logits = torch.tensor([[2.0, 1.9, 0.0]])
    sampler = Sampler(torch.device("cpu"), seed=0)
    greedy_pen = SamplingParams(temperature=0.0, frequency_penalty=0.5)
    assert sampler(logits.clone(), [SamplingRow(greedy_pen, None, [0], [])]).token_ids == [1]
    assert sampler(logits.clone(), [SamplingRow(SamplingParams(temperature=0.0), None, [0], [])]).token_ids == [0]


def test_logprobs_are_normalised_and_ranked(llm):
    out = llm.generate([list(range(40, 50))], SamplingParams(temperature=0.0, max_tokens=5, logprobs=3))[0]
    choice = out.outputs[0]
    assert len(choice.logprobs) == 5
    for tok, lp in zip(choice.token_ids, choice.logprobs):
        assert lp.token_id == tok and lp.logprob <= 0.0
        assert len(lp.top) == 3 and lp.top[0][0] == tok  # greedy: the chosen token is the most likely
        assert [v for _, v in lp.top] == sorted((v for _, v in lp.top), reverse=True)
        assert sum(math.exp(v) for _, v in lp.top) <= 1.0 + 1e-5


def test_stop_string_is_cut_and_never_emitted(llm):
    prompt = list(range(60, 90))
    free = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True))[0].outputs[0]
    text = free.text
    assert len(text) > 6
    stop = text[3:6]
    engine = llm.engine
    engine.add_request("stop-check", prompt, SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True, stop=[stop]))
    streamed = ""
    final = None
    while engine.has_unfinished_requests():
        for out in engine.step():
            streamed += out.outputs[0].delta_text
            final = out
    choice = final.outputs[0]
    assert choice.finish_reason == "stop" and choice.stop_reason == stop
    assert choice.text == text[: text.find(stop)] == streamed


def test_stop_token_ids_and_min_tokens(llm):
    prompt = list(range(90, 110))
    free = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))[0].outputs[0]
    stop_id = free.token_ids[4]
    first_hit = free.token_ids.index(stop_id)
    out = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=[stop_id]))[0]
    assert out.outputs[0].finish_reason == "stop" and out.outputs[0].stop_reason == stop_id
    assert out.outputs[0].token_ids == free.token_ids[: first_hit + 1]
    # Under min_tokens the stop token is suppressed, so generation runs on.
    out = llm.generate(
        [prompt], SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=[stop_id], min_tokens=first_hit + 2)
    )[0]
    assert len(out.outputs[0].token_ids) > first_hit + 1
    assert stop_id not in out.outputs[0].token_ids[: first_hit + 2]


def test_max_tokens_gives_length(llm):
    out = llm.generate([[5, 6, 7]], SamplingParams(temperature=0.0, max_tokens=7, ignore_eos=True))[0]
    assert out.outputs[0].finish_reason == "length" and len(out.outputs[0].token_ids) == 7


def test_bad_requests_fail_clearly(tiny_model_dir, llm):
    with pytest.raises(ContextLengthError) as err:
        llm.engine.add_request("too-long", [5] * 10, SamplingParams(max_tokens=llm.engine.max_model_len))
    assert str(llm.engine.max_model_len) in str(err.value) and "10 in the prompt" in str(err.value)
    with pytest.raises(RequestError):
        llm.engine.add_request("empty", [], SamplingParams())
    with pytest.raises(RequestError):
        llm.engine.add_request("oov", [10**6], SamplingParams())
    with pytest.raises(RequestError):
        SamplingParams(top_p=0.0)
    small = LLM(tiny_model_dir, num_kv_blocks=4)
    with pytest.raises(RequestTooLargeError) as err:
        small.engine.add_request("never-fits", [5] * 40, SamplingParams(max_tokens=40))
    assert "can never run" in str(err.value)
    assert not llm.engine.has_unfinished_requests() and not small.engine.has_unfinished_requests()


def test_stop_token_ids_beyond_the_vocabulary_are_refused(llm):
    with pytest.raises(RequestError) as err:
        llm.engine.add_request("bad-stop", [5, 6], SamplingParams(min_tokens=1, stop_token_ids=[10**9]))
    assert err.value.param == "stop_token_ids"
    assert not llm.engine.has_unfinished_requests()


def test_preempted_sequence_outgrowing_the_budget_still_runs_without_chunked_prefill(tiny_model_dir):
    """With chunked prefill off, a preempted sequence comes back as prompt + output, which can exceed the step
    budget; it must be chunked rather than block the queue forever."""
    llm = LLM(tiny_model_dir, enable_chunked_prefill=False, max_num_batched_tokens=40, max_num_seqs=4,
              num_kv_blocks=8)  # fmt: skip
    prompts = [[10 + i] * 30 for i in range(4)]
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True))
    assert all(len(o.outputs[0].token_ids) == 30 for o in outs)
    assert llm.engine.stats().num_preemptions_total > 0
