"""One weighted injection rule: a compiled pattern, the odds it carries, and the substrings that gate it."""

from __future__ import annotations

from dataclasses import dataclass

import regex


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    family: str
    weight: float
    triggers: tuple[str, ...]
    """Lower-case substrings of which every match contains at least one, written with single spaces (they are
    looked up in the text with whitespace runs collapsed): a C-speed `in` test skips the regex (Python regexes cost
    ~15 us per rule per 500 characters; most prompts trigger few rules)."""
    pattern: regex.Pattern


def make_rule(name: str, family: str, weight: float, triggers: tuple[str, ...], pattern: str) -> Rule:
    return Rule(name, family, weight, triggers, regex.compile(pattern, regex.IGNORECASE | regex.VERSION1))
