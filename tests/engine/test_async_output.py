"""async_output_processing (LLMEngine._step_overlapped): a step's tokens are detokenized, checked for stop strings and
turned into outputs after the next step is launched. On a CPU the forward runs before that anyway, so nothing
overlaps here; what these tests check is that the reordered step gives exactly the outputs of the plain one (token
ids, text, finish and stop reasons, log-probabilities) whatever ends a sequence, and leaves no block behind."""

from __future__ import annotations

import dataclasses

import pytest

from engine import LLM, SamplingParams
from engine.structured.spec import GrammarSpec
from tests.engine.conftest import mixed_prompts
from tests.engine.test_structured_output import EMAIL_REGEX, PERSON_SCHEMA


def _choices(outputs) -> list[list[tuple]]:
    """Each choice's outputs, its log-probabilities' tokens; their values apart (_logprob_values)."""
    return [
        [
            (c.index, c.token_ids, c.text, c.finish_reason, c.stop_reason, _logprob_tokens(c.logprobs))
            for c in out.outputs
        ]
        for out in outputs
    ]


def _logprob_tokens(logprobs) -> list | None:
    return None if logprobs is None else [(lp.token_id, [t for t, _ in lp.top]) for lp in logprobs]


def _logprob_values(outputs) -> list[float]:
    return [
        v
        for out in outputs
        for c in out.outputs
        for lp in c.logprobs or []
        for v in (lp.logprob, *dict(lp.top).values())
    ]


@pytest.fixture(scope="module")
def engines(tiny_model_dir) -> dict[bool, LLM]:
    mode = {"num_kv_blocks": 24, "max_num_seqs": 8}  # tight enough to preempt
    llms = {flag: LLM(tiny_model_dir, async_output_processing=flag, **mode) for flag in (False, True)}
    assert not llms[False].engine.overlap_outputs and llms[True].engine.overlap_outputs
    return llms


def _workload(plain: LLM) -> tuple[list[list[int]], list[SamplingParams]]:
    """Prompts and parameters that end sequences every way: stop strings met mid-output (read from a first greedy
    run, so they are sure to occur), stop strings under min_tokens, max_tokens, EOS, a grammar; with n = 2, seeds,
    log-probabilities and penalties beside them."""
    prompts = mixed_prompts(512)
    greedy = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    texts = [o.outputs[0].text for o in plain.generate(prompts, greedy)]
    params = []
    for i, text in enumerate(texts):
        middle = text[len(text) // 3 : len(text) // 3 + 3]
        kind = i % 8
        if kind == 0:
            p = dataclasses.replace(greedy, stop=[middle])
        elif kind == 1:
            p = dataclasses.replace(greedy, stop=[middle], min_tokens=30, max_tokens=36)
        elif kind == 2:
            p = SamplingParams(temperature=0.9, seed=i, max_tokens=30, n=2, stop=[middle])
        elif kind == 3:
            p = SamplingParams(temperature=0.0, max_tokens=1 + i % 7, logprobs=3)
        elif kind == 4:
            p = SamplingParams(temperature=0.7, seed=i, max_tokens=60, presence_penalty=0.5, frequency_penalty=0.3)
        elif kind == 5:
            p = SamplingParams(temperature=0.0, max_tokens=48, structured=GrammarSpec.regex(EMAIL_REGEX))
        elif kind == 6:
            p = SamplingParams(temperature=0.0, max_tokens=48, structured=GrammarSpec.json_schema(PERSON_SCHEMA, "j"))
        else:
            p = SamplingParams(temperature=1.0, seed=i, max_tokens=200)  # EOS ends it, most likely
        params.append(p)
    return prompts, params


def test_outputs_equal_the_plain_steps(engines):
    prompts, params = _workload(engines[False])
    plain, overlapped = engines[False].generate(prompts, params), engines[True].generate(prompts, params)
    expected, got = _choices(plain), _choices(overlapped)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"prompt {i} ({params[i]}): {g} != {e}"
    # Batches differ between the two (a sequence a stop string ends stays one step more), and a CPU's matmul sums
    # depend on the batch in the last bits.
    assert _logprob_values(overlapped) == pytest.approx(_logprob_values(plain), abs=1e-4)
    reasons = {(c[3], c[4] is not None) for out in expected for c in out}
    assert ("stop", True) in reasons and ("length", False) in reasons  # stop strings and max_tokens both ended some
    for llm in engines.values():
        stats = llm.engine.stats()
        assert stats.num_preemptions_total > 0
        assert stats.num_running == stats.num_waiting == 0 and not llm.engine.requests


def test_a_request_aborted_with_its_token_in_flight_ends_cleanly(engines):
    llm = engines[True]
    engine = llm.engine
    free_before = engine.stats().num_blocks_free
    params = SamplingParams(temperature=0.0, max_tokens=50, ignore_eos=True)
    engine.add_request("a", list(range(5, 40)), params)
    engine.add_request("b", list(range(7, 30)), params)
    for _ in range(4):
        engine.step()
    assert engine._pending is not None  # b's and a's next tokens are on their way
    engine.abort_request("a")
    outs = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            outs[out.request_id] = out
    assert set(outs) == {"b"} and len(outs["b"].outputs[0].token_ids) == 50
    assert engine.stats().num_blocks_free == free_before


def test_a_stop_string_on_the_last_allowed_token_still_reads_stop(engines):
    """max_tokens ends the sequence before its text is read (the step in flight must not take it); the stop string
    that token completes is found after, and wins, as in the plain step."""
    greedy = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
    for prompt in mixed_prompts(512):
        text = engines[False].generate([prompt], greedy)[0].outputs[0].text
        suffix = text[-2:]
        if len(suffix) == 2 and text.find(suffix) == len(text) - 2:  # met first by the last token's text
            break
    else:
        pytest.fail("no prompt's greedy output ends in a string it has not met before")
    params = dataclasses.replace(greedy, stop=[suffix])
    expected = _choices(engines[False].generate([prompt], params))
    assert expected[0][0][3:5] == ("stop", suffix) and len(expected[0][0][1]) == 10
    assert _choices(engines[True].generate([prompt], params)) == expected


def test_switching_off_between_requests_even_after_a_late_stop_string(tiny_model_dir):
    """The last request ends on a stop string found a step late, so a step for it is still in flight when generate
    returns; switching to plain steps drops that step, and the engine goes on."""
    llm = LLM(tiny_model_dir, async_output_processing=True)
    greedy = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    text = llm.generate([[5, 6, 7]], greedy)[0].outputs[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    first = llm.generate([[5, 6, 7]], dataclasses.replace(greedy, stop=[stop]))[0].outputs[0]
    assert first.finish_reason == "stop" and llm.engine._pending is not None
    llm.engine.set_async_output(False)
    assert not llm.engine.overlap_outputs
    again = llm.generate([[5, 6, 7]], dataclasses.replace(greedy, stop=[stop]))[0].outputs[0]
    assert again.text == first.text and again.finish_reason == "stop"
    assert llm.engine.stats().num_blocks_free == llm.engine.stats().num_blocks_total


def test_a_prefill_for_a_decode_replica_checks_its_stop_strings_before_the_next_step(tiny_model_dir):
    """Such a prefill hands its blocks over when it finishes, so its stop strings are read at once (a step later it
    could be preempted, its blocks gone): no step is launched for it after its stop string."""
    from engine.kv_transfer.params import KVTransferRequest

    llm = LLM(tiny_model_dir, async_output_processing=True)
    engine = llm.engine
    greedy = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    prompt = list(range(5, 45))  # two full blocks to hand over
    text = llm.generate([prompt], greedy)[0].outputs[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    engine.add_request("p", prompt, dataclasses.replace(greedy, stop=[stop]), kv_transfer=KVTransferRequest(True))
    outs = []
    while engine.has_unfinished_requests():
        outs += engine.step()
    choice = outs[-1].outputs[0]
    assert choice.finish_reason == "stop" and choice.text == text[: text.index(stop)]
    assert outs[-1].kv_handoff is not None and engine._pending is None
    engine.release_handoffs(["p"])
