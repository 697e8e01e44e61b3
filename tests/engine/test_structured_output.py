"""Structured outputs in the engine (xgrammar): a random-weight tiny model, whose tokens mean nothing, still writes
output that parses and validates, because the grammar masks every other token. Unconstrained neighbours in the
batch are untouched; preemption, prefix caching, forks (n > 1) and speculative decoding keep the output exact."""

from __future__ import annotations

import json
import re
from concurrent.futures import Future

import jsonschema
import pytest
import torch

from engine import LLM, SamplingParams
from engine.structured.compiler import GrammarCompiler, GrammarError
from engine.structured.spec import GrammarSpec
from tests.engine.conftest import mixed_prompts

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
EMAIL_REGEX = r"[a-z]{1,8}@[a-z]{1,8}\.(com|org)"
COLOURS = ["red", "green", "blue", 'dark "navy" blue']
SEEDS = [0, 1, 2, 3, 4, 5]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: a thread pool only adds contention on a shared machine
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def llm(tiny_model_dir) -> LLM:
    return LLM(tiny_model_dir, num_kv_blocks=1024, max_num_seqs=16)


def sampled(spec: GrammarSpec, seed: int, **kwargs) -> SamplingParams:
    # Room to finish: the random model's JSON strings run long (up to ~1,000 tokens), as they end only when it
    # happens to pick a token with a closing quote.
    return SamplingParams(temperature=1.0, seed=seed, max_tokens=1500, structured=spec, **kwargs)


def test_json_object_output_parses_for_every_seed(llm):
    outs = llm.generate(["Reply in JSON."] * len(SEEDS), [sampled(GrammarSpec.json_object(), s) for s in SEEDS])
    for out in outs:
        choice = out.outputs[0]
        assert choice.finish_reason == "stop", choice.text
        assert isinstance(json.loads(choice.text), dict)


def test_json_schema_output_validates(llm):
    spec = GrammarSpec.json_schema(PERSON_SCHEMA, "response_format")
    outs = llm.generate(["A person:"] * len(SEEDS), [sampled(spec, s) for s in SEEDS])
    for out in outs:
        assert out.outputs[0].finish_reason == "stop"
        jsonschema.validate(json.loads(out.outputs[0].text), PERSON_SCHEMA)


def test_guided_choice_returns_one_of_the_choices(llm):
    outs = llm.generate(["Colour:"] * len(SEEDS), [sampled(GrammarSpec.choice(COLOURS), s) for s in SEEDS])
    texts = [o.outputs[0].text for o in outs]
    assert all(t in COLOURS for t in texts), texts
    assert all(o.outputs[0].finish_reason == "stop" for o in outs)


def test_guided_regex_matches(llm):
    outs = llm.generate(["Email:"] * len(SEEDS), [sampled(GrammarSpec.regex(EMAIL_REGEX), s) for s in SEEDS])
    for out in outs:
        assert re.fullmatch(EMAIL_REGEX, out.outputs[0].text), out.outputs[0].text
        assert out.outputs[0].finish_reason == "stop"


def test_the_grammar_ends_the_output_even_with_ignore_eos(llm):
    params = sampled(GrammarSpec.choice(["yes", "no"]), 7, ignore_eos=True)
    choice = llm.generate("Answer:", params)[0].outputs[0]
    assert choice.text in ("yes", "no") and choice.finish_reason == "stop"


def test_each_forked_choice_follows_the_grammar(llm):
    params = SamplingParams(n=4, temperature=1.0, seed=3, max_tokens=100, structured=GrammarSpec.regex(EMAIL_REGEX))
    choices = llm.generate("Emails:", params)[0].outputs
    assert len(choices) == 4
    assert all(re.fullmatch(EMAIL_REGEX, c.text) for c in choices), [c.text for c in choices]


def test_unconstrained_rows_get_the_tokens_they_get_alone(llm):
    greedy = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    free_prompts = mixed_prompts(512, count=3, seed=11)
    alone = [o.outputs[0].token_ids for o in llm.generate(free_prompts, greedy)]
    constrained = SamplingParams(temperature=0.0, max_tokens=24, structured=GrammarSpec.json_object())
    mixed_prompts_ = [free_prompts[0], [5, 6, 7], free_prompts[1], [8, 9], free_prompts[2]]
    mixed_params = [greedy, constrained, greedy, constrained, greedy]
    outs = llm.generate(mixed_prompts_, mixed_params)
    assert [outs[i].outputs[0].token_ids for i in (0, 2, 4)] == alone
    # and the constrained rows were masked: what they wrote is a JSON prefix, not the model's free choice
    for i in (1, 3):
        assert outs[i].outputs[0].text.startswith("{")


def test_prefix_cache_hit_gives_the_same_constrained_output(llm):
    prompt = mixed_prompts(512, count=16, seed=5)[9]  # 64 tokens: whole blocks to hit
    params = SamplingParams(temperature=0.0, max_tokens=60, structured=GrammarSpec.regex(EMAIL_REGEX))
    first, second = llm.generate([prompt], params)[0], llm.generate([prompt], params)[0]
    assert second.num_cached_tokens > 0
    assert second.outputs[0].token_ids == first.outputs[0].token_ids
    assert re.fullmatch(EMAIL_REGEX, first.outputs[0].text)


def _constrained_batch() -> tuple[list[list[int]], list[SamplingParams]]:
    prompts = mixed_prompts(512)
    specs = [GrammarSpec.json_schema(PERSON_SCHEMA, "guided_json"), GrammarSpec.regex(EMAIL_REGEX), None]
    params = [
        SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=spec is None, structured=spec)
        for spec in (specs[i % 3] for i in range(len(prompts)))
    ]
    return prompts, params


@pytest.mark.parametrize("preemption_mode", ["recompute", "swap"])
def test_preemption_keeps_the_constrained_output_exact(tiny_model_dir, llm, preemption_mode):
    prompts, params = _constrained_batch()
    expected = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    tight = LLM(tiny_model_dir, num_kv_blocks=40, max_num_seqs=16, preemption_mode=preemption_mode)
    got = [o.outputs[0].token_ids for o in tight.generate(prompts, params)]
    assert tight.engine.counters.num_preemptions_total > 0
    assert got == expected


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_speculative_decoding_keeps_the_constrained_output_exact(tiny_model_dir, llm, method):
    prompts, params = _constrained_batch()
    prompts = [p + p[:20] + p for p in prompts]  # repeats, so prompt lookup proposes drafts for the free rows
    expected = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    draft = {"speculative_model": tiny_model_dir} if method == "draft" else {}
    spec_llm = LLM(tiny_model_dir, speculative_method=method, speculative_adaptive=False, **draft)
    outs = spec_llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == expected
    assert spec_llm.engine.speculator.stats.num_drafts_total > 0  # speculation ran, for the unconstrained rows
    for out, p in zip(outs, params):
        if p.structured is not None and out.outputs[0].finish_reason == "stop":
            text = out.outputs[0].text
            assert re.fullmatch(EMAIL_REGEX, text) or jsonschema.validate(json.loads(text), PERSON_SCHEMA) is None


def test_bad_schema_raises_a_request_error_and_the_engine_goes_on(llm):
    bad = GrammarSpec.json_schema({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "guided_json")
    with pytest.raises(GrammarError) as info:
        llm.generate("x", SamplingParams(max_tokens=4, structured=bad))
    assert info.value.param == "guided_json"
    assert llm.generate("x", SamplingParams(temperature=0.0, max_tokens=4))[0].finished


def test_a_grammar_failing_after_add_finishes_its_request_not_the_loop(llm):
    """add_request returns before a compile ends; a failure then aborts that request alone."""
    engine = llm.engine
    spec = GrammarSpec.regex("(unclosed", "guided_regex")
    try:
        engine.add_request("late-bad", [5, 6, 7], SamplingParams(max_tokens=4, structured=spec))
    except GrammarError:  # the compile was already done (cached, or fast): refused at once instead
        assert "late-bad" not in engine.requests
        return
    engine.add_request("bystander", [5, 6, 7], SamplingParams(temperature=0.0, max_tokens=4))
    finished = {}
    while engine.has_unfinished_requests():
        finished.update({o.request_id: o for o in engine.step() if o.finished})
    assert finished["late-bad"].outputs[0].finish_reason == "abort"
    assert finished["bystander"].outputs[0].finish_reason == "length"


def test_a_request_waits_for_its_grammar_while_others_decode(llm):
    """The compile is held open (its Future, planted in the cache, is finished by the test): the step loop does not
    wait on it, and the request runs as soon as it is done."""
    engine = llm.engine
    spec = GrammarSpec.regex("[0-9]{4}")
    held: Future = Future()
    engine.grammars._cache[spec] = held  # what submit() hands out while a worker compiles
    engine.add_request("held", [5, 6, 7], SamplingParams(temperature=0.0, max_tokens=20, structured=spec))
    engine.add_request("free", [5, 6, 7], SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True))
    finished = {}
    while "free" not in finished:
        finished.update({o.request_id: o for o in engine.step() if o.finished})
    assert engine.requests["held"].seqs[0].num_output_tokens == 0  # not scheduled while its grammar compiled
    held.set_result(GrammarCompiler(llm.tokenizer, engine.spec.vocab_size, None).compile(spec))
    while engine.has_unfinished_requests():
        finished.update({o.request_id: o for o in engine.step() if o.finished})
    assert re.fullmatch("[0-9]{4}", finished["held"].outputs[0].text)
    assert finished["held"].outputs[0].finish_reason == "stop"


def test_min_tokens_with_a_grammar_is_refused():
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(min_tokens=2, structured=GrammarSpec.json_object())


def test_compiler_caches_by_canonical_source_and_evicts_the_least_recent(llm):
    compiler = GrammarCompiler(llm.tokenizer, llm.engine.spec.vocab_size, sorted(llm.engine.eos_token_ids), 2)
    a = GrammarSpec.json_schema('{"type": "object",  "properties": {}}', "guided_json")
    a_compact = GrammarSpec.json_schema({"type": "object", "properties": {}}, "response_format")
    assert a == a_compact  # the same schema, spaced differently, named by another field
    first = compiler.submit(a)
    assert compiler.submit(a_compact) is first
    first.result()
    compiler.submit(GrammarSpec.regex("x+"))
    compiler.submit(GrammarSpec.regex("y+"))
    assert compiler.submit(a) is not first  # evicted by the two after it
