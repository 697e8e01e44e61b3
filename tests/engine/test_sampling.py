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
    tokens = torch.tensor(
        sampler(logits, [SamplingRow(SamplingParams(temperature=1.0), None, [], [])] * 6000).token_ids
    )
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
    engine.add_request(
        "stop-check", prompt, SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True, stop=[stop])
    )
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


def _penalized_logits(sampler: Sampler, rows: list[SamplingRow], vocab: int) -> torch.Tensor:
    logits = torch.zeros(len(rows), vocab)
    sampler._apply_penalties(logits, rows, vocab)
    return logits


def _expected_penalized_logits(rows: list[SamplingRow], vocab: int) -> torch.Tensor:
    counts = torch.stack([torch.bincount(torch.tensor(r.output_token_ids, dtype=torch.long), minlength=vocab)
                          for r in rows]).float()  # fmt: skip
    freq = torch.tensor([r.params.frequency_penalty for r in rows])[:, None]
    pres = torch.tensor([r.params.presence_penalty for r in rows])[:, None]
    return -(freq * counts + pres * (counts > 0).float())


def test_penalty_counts_follow_each_sequence_across_steps():
    """Counts carried from step to step agree with counting each output from scratch, as sequences grow by one
    token or several (speculation), sit out steps (preemption), fork new sequences and finish."""
    import random

    rng = random.Random(0)
    vocab = 50
    sampler = Sampler(torch.device("cpu"), seed=0)
    params = [SamplingParams(frequency_penalty=0.5 * (i % 3), presence_penalty=0.25 * (i % 2)) for i in range(6)]
    outputs = {i: [rng.randrange(vocab) for _ in range(rng.randrange(5))] for i in range(4)}
    for step in range(60):
        if step % 15 == 0:
            outputs[len(outputs)] = []  # a fork: a new sequence with its own (empty) output list
        if step % 20 == 19:
            del outputs[min(outputs)]  # a finished sequence
        present = [i for i in outputs if rng.random() < 0.8]  # the others are preempted or left out this step
        rows = [SamplingRow(params[i % len(params)], None, outputs[i], []) for i in present]
        if rows:
            got = _penalized_logits(sampler, rows, vocab)
            assert torch.equal(got, _expected_penalized_logits(rows, vocab)), step
        for i in outputs:
            outputs[i] += [rng.randrange(vocab) for _ in range(rng.choice([0, 1, 1, 1, 3]))]


def test_a_step_counts_only_the_tokens_added_since_the_last():
    """A step must not recount each sequence's whole output (that cost grows with the output, every step). Rewriting
    old entries, which a sequence never does, shows what is read: only the new tokens."""
    vocab = 10
    sampler = Sampler(torch.device("cpu"), seed=0)
    output = [1, 1, 2]
    row = SamplingRow(SamplingParams(frequency_penalty=1.0), None, output, [])
    _penalized_logits(sampler, [row], vocab)
    output[:3] = [9, 9, 9]
    output.append(3)
    assert _penalized_logits(sampler, [row], vocab)[0, [1, 2, 3, 9]].tolist() == [-2.0, -1.0, -1.0, 0.0]


def test_penalties_are_the_same_with_preemption_and_forks(tiny_model_dir):
    """Penalized sequences that are preempted (and recomputed) and forked (n=2) sample what they sample without
    preemption: their counts survive sitting out steps."""
    prompts = [[10 + i] * 30 for i in range(4)]
    params = SamplingParams(n=2, temperature=1.0, seed=7, frequency_penalty=1.5, presence_penalty=0.5, max_tokens=24,
                            ignore_eos=True)  # fmt: skip
    roomy = LLM(tiny_model_dir, max_num_seqs=8)
    cramped = LLM(tiny_model_dir, max_num_batched_tokens=40, max_num_seqs=8, num_kv_blocks=10)
    expected = [[c.token_ids for c in o.outputs] for o in roomy.generate(prompts, params)]
    assert [[c.token_ids for c in o.outputs] for o in cramped.generate(prompts, params)] == expected
    assert cramped.engine.stats().num_preemptions_total > 0


def test_a_top_p_of_one_keeps_every_token_beside_a_row_with_top_p():
    """Rows are truncated together; a row without top-p must keep its whole tail even though its cumulative sum
    rounds past 1.0 before the end (32k tokens lost about a thousand)."""
    logits = torch.randn(2, 32000, generator=torch.Generator().manual_seed(0)) * 3
    truncated = Sampler._truncate(logits.clone(), [SamplingParams(top_p=1.0), SamplingParams(top_p=0.9)])
    assert torch.equal(truncated[0], logits[0])
    assert torch.isinf(truncated[1]).any()


def test_seeded_rows_leave_the_engine_generator_alone():
    """A seeded row draws from its own generator only; the engine's draws for the unseeded rows alone."""
    vocab = 64
    logits = torch.randn(4, vocab, generator=torch.Generator().manual_seed(1))
    sampler = Sampler(torch.device("cpu"), seed=5)
    rows = [SamplingRow(SamplingParams(seed=i), torch.Generator().manual_seed(i), [], []) if i % 2 else
            SamplingRow(SamplingParams(), None, [], []) for i in range(4)]  # fmt: skip
    sampler(logits.clone(), rows)
    expected = torch.Generator().manual_seed(5)
    torch.empty(2, vocab).exponential_(generator=expected)
    assert torch.equal(sampler.generator.get_state(), expected.get_state())
    seeded = [SamplingRow(SamplingParams(seed=i), torch.Generator().manual_seed(i), [], []) for i in range(4)]
    sampler(logits.clone(), seeded)
    assert torch.equal(sampler.generator.get_state(), expected.get_state())


def test_greedy_rows_take_no_random_draw():
    """Greedy rows keep their argmax without the sort or a draw, so the engine generator serves the sampled rows
    alone: in a batch of one greedy and one sampled row it moves as for the sampled row alone."""
    vocab = 64
    logits = torch.randn(2, vocab, generator=torch.Generator().manual_seed(3))
    sampler = Sampler(torch.device("cpu"), seed=5)
    rows = [
        SamplingRow(SamplingParams(temperature=0.0), None, [], []),
        SamplingRow(SamplingParams(top_p=0.9), None, [], []),
    ]
    result = sampler(logits.clone(), rows)
    assert result.token_ids[0] == int(logits[0].argmax())
    expected = torch.Generator().manual_seed(5)
    torch.empty(1, vocab).exponential_(generator=expected)
    assert torch.equal(sampler.generator.get_state(), expected.get_state())


def test_logprobs_take_one_host_transfer_per_tensor(monkeypatch):
    """Each .tolist() of a device tensor is a sync; the logprobs of R rows take three, not two per row."""
    logits = torch.randn(6, 40, generator=torch.Generator().manual_seed(2))
    logprobs = torch.log_softmax(logits, -1)
    want = [3, None, 0, 5, 1, None]
    token_ids = [4, 7, 1, 0, 39, 2]
    calls = []
    tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: calls.append(self.shape) or tolist(self))
    out = Sampler._gather_logprobs(logprobs, token_ids, want)
    monkeypatch.undo()
    assert len(calls) == 3
    for i, k in enumerate(want):
        if k is None:
            assert out[i] is None
            continue
        values, ids = logprobs[i].topk(k)
        assert out[i].token_id == token_ids[i] and out[i].logprob == logprobs[i, token_ids[i]].item()
        assert out[i].top == list(zip(ids.tolist(), values.tolist()))


def test_logit_bias_shifts_only_its_own_rows():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(3))
    best = logits.argmax(dim=-1).tolist()
    second = logits.topk(2, dim=-1).indices[:, 1].tolist()
    rows = [
        SamplingRow(SamplingParams(temperature=0.0, logit_bias={7: 100.0}), None, [], []),
        SamplingRow(SamplingParams(temperature=0.0), None, [], []),
        SamplingRow(SamplingParams(temperature=0.0, logit_bias={best[2]: -100.0, 9: 0.0}), None, [], []),
    ]
    assert Sampler(torch.device("cpu"), seed=0)(logits.clone(), rows).token_ids == [7, best[1], second[2]]
