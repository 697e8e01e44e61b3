"""Structured outputs with speculative decoding (issue 23): constrained requests speculate too, and stay exact.

Greedy constrained output is token for token the output without speculation, for each kind of grammar and both
proposers, and the constrained rows really draft and accept (the spec-decode counters, with only constrained requests
in the batch); every emitted token is one the grammar accepts; a draft is cut at its first token the grammar rejects
and after a stop token, which ends the sequence inside the draft; forks and preemption keep it exact; seeded sampling
stays valid and reproducible. The prompts hold text of each grammar's language, so prompt lookup finds drafts in them.
Real tiny model, real xgrammar."""

from __future__ import annotations

import json

import pytest
import torch
import xgrammar as xgr

from engine import LLM, SamplingParams
from engine.outputs import CompletionOutput
from engine.structured.draft_masks import DraftMasks
from engine.structured.spec import GrammarSpec
from engine.tools.parsers import tool_parser

PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
    },
    "required": ["name", "age", "role"],
}
WEATHER_TOOL = {
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 10},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["city", "days"],
    },
}
PERSON = json.dumps({"name": "Ann", "age": 31, "role": "admin"})
CALL = (
    "<tool_call>\n" + json.dumps({"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}) + "\n</tool_call>"
)
# kind -> (prompt, grammar); the grammars' outputs all end within MAX_TOKENS (bounded strings and numbers).
CASES = {
    "json_schema": (f"People:\n{PERSON}\n{PERSON}\n", GrammarSpec.json_schema(PERSON_SCHEMA, "response_format")),
    "regex": (
        "Emails:\nbob@abc.com\nann@xyz.org\nbob@abc.com\n",
        GrammarSpec.regex(r"[a-z]{1,8}@[a-z]{1,8}\.(com|org)"),
    ),
    "choice": ("Colours:\nred\ngreen\nblue\nred\ngreen\nblue\n", GrammarSpec.choice(["red", "green", "blue", "navy"])),
    "tool_call": (f"Calls:\n{CALL}\n{CALL}\n", tool_parser("hermes").forced([WEATHER_TOOL])),
}
MAX_TOKENS = 160
METHODS = ["ngram", "draft"]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: a thread pool only adds contention on a shared machine
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def plain(tiny_model_dir) -> LLM:
    return LLM(tiny_model_dir, num_kv_blocks=512, max_num_seqs=16)


def speculating_llm(model_dir: str, method: str, **config) -> LLM:
    # The draft model is the target itself: cheap here, and it agrees with the target wherever both see the same mask.
    draft = {"speculative_model": model_dir} if method == "draft" else {}
    return LLM(model_dir, speculative_method=method, speculative_adaptive=False, **draft, **config)


@pytest.fixture(scope="module")
def speculating(tiny_model_dir) -> dict[str, LLM]:
    return {method: speculating_llm(tiny_model_dir, method, num_kv_blocks=512) for method in METHODS}


def assert_follows_grammar(llm: LLM, spec: GrammarSpec, output: CompletionOutput) -> None:
    """A fresh matcher accepts every emitted token, and the output ended where the grammar did ("stop")."""
    engine = llm.engine
    matcher = xgr.GrammarMatcher(engine.grammars.compile(spec), override_stop_tokens=sorted(engine.eos_token_ids))
    for position, token in enumerate(output.token_ids):
        assert matcher.accept_token(token), f"token {position} ({token}) of {output.text!r} breaks the grammar"
    assert output.finish_reason == "stop" and matcher.is_terminated(), output.finish_reason


def spec_counts(llm: LLM) -> tuple[int, int]:
    stats = llm.engine.speculator.stats
    return stats.num_draft_tokens_total, stats.num_accepted_tokens_total


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", sorted(CASES))
def test_greedy_constrained_output_is_unchanged_and_speculated(kind, method, plain, speculating):
    prompt, spec = CASES[kind]
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, structured=spec)
    expected = plain.generate(prompt, params)[0].outputs[0]
    llm = speculating[method]
    drafted, accepted = spec_counts(llm)
    got = llm.generate(prompt, params)[0].outputs[0]
    assert got.token_ids == expected.token_ids
    assert_follows_grammar(llm, spec, got)
    now_drafted, now_accepted = spec_counts(llm)
    assert now_drafted > drafted and now_accepted > accepted, "the constrained request did not speculate"


def test_a_draft_is_cut_at_a_token_the_grammar_rejects_and_after_a_stop_token(plain):
    tokenizer, engine = plain.tokenizer, plain.engine
    a, b, c, d, e, f = (tokenizer.encode(ch, add_special_tokens=False)[0] for ch in "abcdef")
    stop = min(engine.eos_token_ids)
    grammar = engine.grammars.compile(GrammarSpec.regex("ab(cd|ce)f"))
    matchers = [xgr.GrammarMatcher(grammar, override_stop_tokens=[stop]) for _ in range(3)]
    drafts = [[a, b, c, a, f], [a, b, c, e, f, stop, a], [b, a]]
    masks = DraftMasks(engine.spec.vocab_size)
    assert masks.check([10, 11, 12], matchers, drafts) == [3, 6, 0]

    num_drafts = [3, 6, 0]
    logits = torch.zeros(4, 7, engine.spec.vocab_size)  # row 3: a sequence without a grammar
    masks.apply(logits, [10, 11, 12, 13], num_drafts)
    reference = xgr.GrammarMatcher(grammar, override_stop_tokens=[stop])
    bitmask = xgr.allocate_token_bitmask(1, engine.spec.vocab_size)
    for row, (draft, n) in enumerate(zip(drafts, num_drafts)):
        for position in range(n + 1):
            allowed = set(torch.nonzero(logits[row, position] == 0).flatten().tolist())
            if position > 0 and draft[position - 1] == stop:  # after the stop token: verified, never emitted
                assert len(allowed) == engine.spec.vocab_size
                continue
            reference.fill_next_token_bitmask(bitmask)
            expected = {t for t in range(engine.spec.vocab_size) if (bitmask[0, t >> 5] >> (t & 31)) & 1}
            assert allowed == expected, (row, position)
            if position < n:
                assert reference.accept_token(draft[position])
        reference.reset()
        assert (logits[row, n + 1 :] == 0).all()  # past the cut: not verified, left as is
    assert (logits[3] == 0).all()
    # The walk leaves every matcher where it was: at the start of the grammar, as the fresh reference is.
    reference.fill_next_token_bitmask(bitmask)
    start = bitmask.clone()
    for matcher in matchers:
        matcher.fill_next_token_bitmask(bitmask)
        assert torch.equal(bitmask, start)


@pytest.mark.parametrize("method", METHODS)
def test_a_grammar_that_ends_inside_a_draft_ends_the_sequence_there(method, plain, tiny_model_dir):
    """After the first output token `g`, prompt lookup proposes `re en <stop> \\n`; the draft is cut after the stop
    token, which is accepted and ends the sequence: every output token after the first came from that one draft."""
    tokenizer = plain.tokenizer
    stop = 4  # <|eot_id|>: the stop token this model picks to end the choice
    assert stop in plain.engine.eos_token_ids
    green = tokenizer.encode("green", add_special_tokens=False)
    newline = tokenizer.encode("\n", add_special_tokens=False)
    prompt = tokenizer.encode("Colour:\n", add_special_tokens=False) + (green + [stop] + newline) * 2
    params = SamplingParams(temperature=0.0, max_tokens=20, structured=GrammarSpec.choice(["green"]))
    expected = plain.generate([prompt], params)[0].outputs[0]
    assert expected.token_ids == green + [stop]
    llm = speculating_llm(tiny_model_dir, method, num_kv_blocks=64)
    got = llm.generate([prompt], params)[0].outputs[0]
    assert got.token_ids == expected.token_ids and got.finish_reason == "stop"
    stats = llm.engine.speculator.stats
    assert stats.num_drafts_total == 1
    assert stats.num_draft_tokens_total == stats.num_accepted_tokens_total == len(green)  # `re en <stop>`


def test_forks_and_preemption_keep_constrained_speculation_exact(plain, tiny_model_dir):
    prompts = [prompt for prompt, _ in CASES.values()]
    params = [SamplingParams(n=2, temperature=0.0, max_tokens=MAX_TOKENS, structured=s) for _, s in CASES.values()]
    expected = [[c.token_ids for c in o.outputs] for o in plain.generate(prompts, params)]
    tight = speculating_llm(tiny_model_dir, "ngram", num_kv_blocks=24, max_num_seqs=8)
    outs = tight.generate(prompts, params)
    assert [[c.token_ids for c in o.outputs] for o in outs] == expected
    assert tight.engine.counters.num_preemptions_total > 0
    assert spec_counts(tight)[1] > 0
    for out, (_, spec) in zip(outs, CASES.values()):
        for choice in out.outputs:
            assert_follows_grammar(tight, spec, choice)
    assert tight.engine.stats().num_blocks_free == tight.engine.stats().num_blocks_total


@pytest.mark.parametrize("method", METHODS)
def test_seeded_constrained_sampling_with_speculation_is_valid_and_reproducible(method, tiny_model_dir):
    kinds = sorted(CASES)
    prompts = [CASES[kind][0] for kind in kinds]
    params = [
        SamplingParams(temperature=1.0, seed=40 + i, max_tokens=MAX_TOKENS, structured=CASES[kind][1])
        for i, kind in enumerate(kinds)
    ]
    runs = []
    for _ in range(2):
        llm = speculating_llm(tiny_model_dir, method, num_kv_blocks=512)
        outs = [o.outputs[0] for o in llm.generate(prompts, params)]
        for out, kind in zip(outs, kinds):
            assert_follows_grammar(llm, CASES[kind][1], out)
        assert spec_counts(llm)[1] > 0
        runs.append([o.token_ids for o in outs])
    assert runs[0] == runs[1]
