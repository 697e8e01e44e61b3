"""The grammar fixes found by 800 parse and tool-call trials (tests/engine/server/test_parse_trials.py), each on its
own: JSON strings never carry a lone surrogate; a forced call's schema keeps the `$defs` references pydantic writes;
the CPU mask apply equals xgrammar's own kernel."""

from __future__ import annotations

import json

import openai
import pytest
import torch
import xgrammar as xgr
from pydantic import BaseModel
from xgrammar.testing import _is_grammar_accept_string as accepts

from engine.structured.compiler import json_schema_ebnf, tool_calls_ebnf
from engine.structured.masker import CpuMaskApply, allow_unconstrained
from engine.tools.parsers import tool_parser


@pytest.mark.parametrize("bounded", [False, True])
def test_strings_take_surrogate_pairs_but_no_lone_surrogate(bounded):
    string = {"type": "string", "maxLength": 8} if bounded else {"type": "string"}
    schema = json.dumps({"type": "object", "properties": {"a": string}, "required": ["a"]})
    grammar = xgr.Grammar.from_ebnf(json_schema_ebnf(schema, strict=True))
    assert accepts(grammar, '{"a": "x"}')
    assert not accepts(grammar, '{"a": "\\ud800"}')
    assert not accepts(grammar, '{"a": "\\udc00x"}')
    if not bounded:  # xgrammar writes no escapes into length-bounded strings
        assert accepts(grammar, '{"a": "\\ud83d\\ude00"}')


class Pet(BaseModel):
    name: str


class Owner(BaseModel):
    pets: list[Pet]


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        ("hermes", '<tool_call>\n{"name": "Owner", "arguments": {"pets": [{"name": "Rex"}]}}\n</tool_call>'),
        ("llama3_json", '{"name": "Owner", "parameters": {"pets": [{"name": "Rex"}]}}'),
        ("mistral", '[TOOL_CALLS][{"name": "Owner", "arguments": {"pets": [{"name": "Rex"}]}}]'),
    ],
)
@pytest.mark.parametrize("tools", [1, 2])
def test_forced_calls_keep_the_parameters_references(parser, text, tools):
    functions = [openai.pydantic_function_tool(Owner)["function"]]
    assert "$defs" in functions[0]["parameters"]  # what pydantic writes: "#/$defs/Pet" from the parameters' root
    if tools == 2:  # nested one level deeper, under anyOf
        functions.append({"name": "Other", "parameters": {"type": "object", "properties": {}}})
    spec = tool_parser(parser).forced(functions)
    grammar = xgr.Grammar.from_ebnf(tool_calls_ebnf(spec.source))
    assert accepts(grammar, text)
    assert not accepts(grammar, text.replace('{"name": "Rex"}', '{"nom": "Rex"}'))


@pytest.mark.parametrize("vocab", [512, 1000, 4096])
@pytest.mark.parametrize("rows", ["all", "some"])
def test_cpu_mask_apply_equals_xgrammars_kernel(vocab, rows):
    generator = torch.Generator().manual_seed(vocab)
    batch = 6
    bitmask = xgr.allocate_token_bitmask(batch, vocab)
    bitmask.copy_(torch.randint(-(2**31), 2**31 - 1, bitmask.shape, generator=generator, dtype=torch.int32))
    logits = torch.randn(batch, vocab + 7, generator=generator)  # the model's rows may be wider than the vocabulary
    logits[0, 3] = float("inf")
    picked = list(range(batch)) if rows == "all" else [1, 4]
    expected = logits.clone()
    xgr.apply_token_bitmask_inplace(expected, bitmask, vocab_size=vocab, indices=picked)
    CpuMaskApply(bitmask.shape[1])(logits, bitmask, picked, vocab)
    assert torch.equal(logits, expected)


@pytest.mark.parametrize("vocab", [512, 1000])
def test_unconstrained_rows_allowed_everything_mask_like_a_row_list(vocab):
    """The accelerator path masks every row, unconstrained rows with everything allowed: the same logits as masking
    the constrained rows alone (xgrammar's kernel, here its CPU one; the random bits left in the free rows from an
    earlier step must not leak)."""
    generator = torch.Generator().manual_seed(vocab)
    bitmask = xgr.allocate_token_bitmask(6, vocab)
    bitmask.copy_(torch.randint(-(2**31), 2**31 - 1, bitmask.shape, generator=generator, dtype=torch.int32))
    logits = torch.randn(5, vocab + 7, generator=generator)
    matchers = [object(), None, object(), None, None]  # only whether a row has one matters here
    expected = logits.clone()
    xgr.apply_token_bitmask_inplace(expected, bitmask, vocab_size=vocab, indices=[0, 2])
    allow_unconstrained(bitmask, matchers)  # type: ignore[arg-type]
    xgr.apply_token_bitmask_inplace(logits, bitmask[:5], vocab_size=vocab)
    assert torch.equal(logits, expected)
