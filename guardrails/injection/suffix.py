"""Adversarial suffixes: a request in prose followed by an optimized token soup (GCG, Zou et al. 2023, and the
attacks built on it: AutoDAN's token variant, DSN, transfer suffixes). The soup is drawn from a model's vocabulary,
so it mixes words, code pieces and brackets, and nothing makes its brackets pair: "...a tutorial on X ({[HTMLsvg
readers | Sure] Sure,].[ githubrelative{[paper". That is the signal, not any list of known suffixes, so a suffix
optimized tomorrow is found as well as today's.

Written from the attack's mechanism; its benign neighbours are what a gateway sees with brackets in it: prose that
quotes code or a regex, list enumerators ("a) ... b) ... c)"), emoticons, wrapped lines. Checked against documents
and code the detector never trained on (docs/benchmarks.md, "Prompt injection"): one line in 319,000 of this
machine's Python sources and package documentation fires.
"""

from __future__ import annotations

import regex

TAIL_CHARS = 200
"""A suffix is short (20-40 tokens in the published attacks); only a line's end is read, so a long line of prose
with a stray bracket early on cannot add up."""
MIN_UNPAIRED = 3
"""Brackets that no bracket pairs with, in the tail. Two fire on ordinary wrapped prose ("(which you" at a line's
end, "... or uri is None, (" ); three did not, in the documents above."""
PROSE_HEAD_WORDS = 5
"""The line opens with this many plain words: a request in prose, not a line of code or a regex (which open with an
identifier, a keyword with punctuation, or a quote)."""

_BRACKETS = "()[]{}"
_CLOSES = {")": "(", "]": "[", "}": "{"}
_PLAIN_WORD = regex.compile(r"^\p{L}+(?:['’-]\p{L}+)*[,.:;!?]?$")  # "step-by-step", "don't"
_NOT_BRACKETS = regex.compile(
    r"(?<!\w)[:;=8xX]['-]?[()\[\]{}]|(?<!\S)[()\[\]{}]['-]?[:;=](?!\S)"  # emoticons, either way round
    r"|(?<!\S)(?:\d{1,3}|[A-Za-z]|[ivxIVX]{1,4})\)"  # enumerators: 1) a) iv)
)


def has_adversarial_suffix(text: str) -> bool:
    """True when some line opens as prose and ends in a tail whose brackets do not pair."""
    if sum(map(text.count, _BRACKETS)) < MIN_UNPAIRED:  # most prompts: six C-speed counts and out
        return False
    for line in text.splitlines():
        tail = line[-TAIL_CHARS:]
        if sum(map(tail.count, _BRACKETS)) < MIN_UNPAIRED:
            continue
        if _opens_as_prose(line) and unpaired_brackets(_NOT_BRACKETS.sub(" ", tail)) >= MIN_UNPAIRED:
            return True
    return False


def _opens_as_prose(line: str) -> bool:
    head = line.split(maxsplit=PROSE_HEAD_WORDS)[:PROSE_HEAD_WORDS]
    return len(head) == PROSE_HEAD_WORDS and all(_PLAIN_WORD.match(word) for word in head)


def unpaired_brackets(text: str) -> int:
    """Brackets of `text` that close nothing or are never closed. A closer whose opener lies deeper in the stack
    closes it and leaves the openers above it unpaired, as a parser would read `( [ )`."""
    stack: list[str] = []
    unpaired = 0
    for char in text:
        if char in "([{":
            stack.append(char)
        elif char in _CLOSES:
            opener = _CLOSES[char]
            if opener not in stack:
                unpaired += 1
                continue
            while stack[-1] != opener:
                stack.pop()
                unpaired += 1
            stack.pop()
    return unpaired + len(stack)
