"""The engine's batched token append (one loop over the step's sequences, the request's stop tokens as one set)
ends, cuts and reports every sequence exactly as the per-sequence append it replaced, on crafted token streams:
EOS with and without ignore_eos, stop token ids under and past min_tokens, stop strings, max_tokens, and the
context length."""

from __future__ import annotations

import pytest

from engine import LLM, SamplingParams
from engine.llm_engine import LLMEngine
from engine.outputs import TokenLogprob
from engine.sequence import Sequence

MAX_MODEL_LEN = 64


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(tiny_model_dir, max_num_seqs=32, max_model_len=MAX_MODEL_LEN)


def per_sequence_append(engine: LLMEngine, seq: Sequence, token_id: int, logprob: TokenLogprob | None) -> None:
    """The append as it was, one sequence at a time (engine/llm_engine.py before the batched loop)."""
    request, params = seq.request, seq.request.params
    seq.append_token(token_id)
    if seq.logprobs is not None:
        seq.logprobs.append(logprob)  # type: ignore[arg-type]
    if token_id in params.stop_token_ids or (not params.ignore_eos and token_id in engine.eos_token_ids):
        seq.stop_reason = token_id if token_id in params.stop_token_ids else None
        engine._finish(seq, "stop")
        return
    num_out = seq.num_output_tokens
    stop = seq.detokenizer.append(token_id, check_stop=num_out >= params.min_tokens)
    if stop is not None:
        seq.stop_reason = stop
        engine._finish(seq, "stop")
    elif num_out >= request.max_tokens or seq.num_tokens >= engine.max_model_len:
        engine._finish(seq, "length")


def crafted_cases(llm: LLM) -> list[tuple[list[int], SamplingParams, list[int]]]:
    """(prompt, params, the tokens the sequence is handed): each ends (or not) for a different reason."""
    engine = llm.engine
    eos = min(engine.eos_token_ids)
    words = llm.tokenizer.encode(" the cat sat on the mat and the dog ran off", add_special_tokens=False)
    text = llm.tokenizer.decode(words)
    stop_string = text[9:14]  # inside the text, across a token boundary
    assert stop_string and stop_string in text
    prompt = list(range(20, 36))
    stream = words + [eos] + words
    stop_id = words[3]
    return [
        (prompt, SamplingParams(max_tokens=40), stream),  # EOS stops
        (prompt, SamplingParams(max_tokens=40, ignore_eos=True), stream),  # EOS passes, then length
        (prompt, SamplingParams(max_tokens=40, stop_token_ids=[stop_id]), stream),  # a stop id
        (prompt, SamplingParams(max_tokens=40, stop_token_ids=[stop_id, eos]), stream),  # EOS also a stop id
        (prompt, SamplingParams(max_tokens=40, stop=[stop_string]), stream),  # a stop string, cut
        (prompt, SamplingParams(max_tokens=40, stop=[stop_string], min_tokens=len(words)), stream),  # checked late
        (prompt, SamplingParams(max_tokens=5, ignore_eos=True), stream),  # max_tokens
        (list(range(20, 20 + MAX_MODEL_LEN - 3)), SamplingParams(max_tokens=None, ignore_eos=True), stream),  # context
        (prompt, SamplingParams(max_tokens=40, ignore_eos=True, stop=["zzz", stop_string[:2]]), stream),
    ]


def test_batched_append_matches_the_per_sequence_append(llm):
    engine = llm.engine
    cases = crafted_cases(llm)
    for i, (prompt, params, _) in enumerate(cases):
        engine.add_request(f"batched-{i}", prompt, params)
        engine.add_request(f"single-{i}", prompt, params)
    batched = [engine.requests[f"batched-{i}"].seqs[0] for i in range(len(cases))]
    single = [engine.requests[f"single-{i}"].seqs[0] for i in range(len(cases))]
    for step in range(max(len(tokens) for _, _, tokens in cases)):
        live = [i for i, (_, _, tokens) in enumerate(cases) if step < len(tokens) and not batched[i].is_finished]
        token_ids = [cases[i][2][step] for i in live]
        engine._append_tokens([batched[i] for i in live], token_ids, [None] * len(live))
        for i, token_id in zip(live, token_ids):
            if not single[i].is_finished:
                per_sequence_append(engine, single[i], token_id, None)
    reasons = set()
    for b, s in zip(batched, single):
        assert (b.output_ids, b.detokenizer.text, b.finish_reason, b.stop_reason) == (
            s.output_ids,
            s.detokenizer.text,
            s.finish_reason,
            s.stop_reason,
        )
        reasons.add((b.finish_reason, type(b.stop_reason).__name__))
    # The cases reach every ending: a stop token (reason: its id, or None for EOS), a stop string, and length.
    assert reasons >= {("stop", "int"), ("stop", "NoneType"), ("stop", "str"), ("length", "NoneType")}
    for i in range(len(cases)):
        engine.abort_request(f"batched-{i}")
        engine.abort_request(f"single-{i}")


def test_the_stop_token_set_is_the_stop_ids_and_eos_unless_ignored(llm):
    engine = llm.engine
    eos = engine.eos_token_ids
    engine.add_request("with-eos", [5, 6, 7], SamplingParams(stop_token_ids=[9, 11]))
    engine.add_request("without-eos", [5, 6, 7], SamplingParams(stop_token_ids=[9, 11], ignore_eos=True))
    assert engine.requests["with-eos"].stop_token_set == {9, 11} | eos
    assert engine.requests["without-eos"].stop_token_set == {9, 11}
    engine.abort_request("with-eos")
    engine.abort_request("without-eos")
