"""Adversarial suffixes: a request in prose followed by an optimized token soup (GCG, Zou et al. 2023, and the
attacks built on it: AutoDAN's token variant, DSN, transfer suffixes). The soup is drawn from a model's vocabulary,
so it mixes words, code pieces and brackets, and nothing makes its brackets pair: "...a tutorial on X ({[HTMLsvg
readers | Sure] Sure,].[ githubrelative{[paper". That is the signal, not any list of known suffixes, so a suffix
optimized tomorrow is found as well as today's.

Written from the attack's mechanism; its benign neighbours are what a gateway sees with brackets in it: prose that
quotes code, formulas and intervals ("f(x)", "[0, 1)"), list enumerators ("a)", "1.2)", "б)"), emoticons (":)",
")))"), a long JSON line, brackets quoted in a question about brackets. Brackets are paired over the whole line
first; only those left unpaired near its end count, and of those not the ones an enumerator, an emoticon, an
interval or a quotation explains. Still firing: a one-line code question whose brackets are broken ("why does this
not compile? if (x > 0 && (y < 3 || z[i] {"). Evaded by: a soup on a line of its own, or followed by a line of
prose longer than TAIL_CHARS. Measured on documents and code it never saw: docs/benchmarks.md, "Prompt injection".
"""

from __future__ import annotations

import regex

TAIL_CHARS = 200
"""A suffix is short (20-40 tokens in the published attacks); only unpaired brackets in a line's last this many
characters count, so a long line of prose with a stray bracket early on cannot add up."""
MIN_UNPAIRED = 3
"""Unpaired brackets in the tail. Two fire on ordinary wrapped prose ("(which you" at a line's end, "... or uri is
None, ("); three did not, in the documents measured."""
PROSE_HEAD_WORDS = 5
"""The line opens with this many plain words: a request in prose, not a line of code or a regex (which open with an
identifier, a keyword with punctuation, or a quote)."""

_BRACKETS = "()[]{}"
_CLOSES = {")": "(", "]": "[", "}": "{"}
_PLAIN_WORD = regex.compile(r"^\p{L}+(?:['’-]\p{L}+)*[,.:;!?]?$")  # "step-by-step", "don't"
_ENDPOINT = r"\s*[-+−]?(?:[\d.]+|\p{L}|∞|π)(?:\s*[-+*/]\s*(?:[\d.]+|\p{L}|∞|π))?\s*"
_BRACKET_LOOKALIKES = regex.compile(
    r"[:;=]['-]?[()\[\]{}]|(?<!\S)[()\[\]{}]['-]?[:;=](?!\S)"  # emoticons, either way round
    r"|(?<!\S)[()]{2,}(?!\S)"  # parentheses alone: ")))" is a smile in Russian chat, "(()(()" a question's example
    r"|(?<!\S)(?:\d{1,3}(?:\.\d{1,3})*|\p{L}|[ivxIVX]{1,4})\)"  # enumerators: 1) 1.2) a) б) iv)
    rf"|[\[(]{_ENDPOINT},{_ENDPOINT}[\])]"  # intervals: [0, 1) (a, b] [0, ∞)
    r"|(['\"`])[\s()\[\]{}]{1,12}\1"  # brackets quoted: "is '((]' balanced?"
)


def has_adversarial_suffix(text: str) -> bool:
    """True when some line opens as prose and ends in a tail whose brackets do not pair."""
    if sum(map(text.count, _BRACKETS)) < MIN_UNPAIRED:  # most prompts: six C-speed counts and out
        return False
    for line in text.splitlines():
        tail_start = max(0, len(line) - TAIL_CHARS)
        if sum(map(line[tail_start:].count, _BRACKETS)) < MIN_UNPAIRED or not _opens_as_prose(line):
            continue
        unpaired = [i for i in unpaired_positions(line) if i >= tail_start]
        if len(unpaired) >= MIN_UNPAIRED and len(unpaired) - _explained(line, unpaired) >= MIN_UNPAIRED:
            return True
    return False


def unpaired_positions(text: str) -> list[int]:
    """Where the brackets of `text` are that close nothing or are never closed, in order. A closer whose opener lies
    deeper in the stack closes it and leaves the openers above it unpaired, as a parser would read `( [ )`."""
    stack: list[tuple[str, int]] = []
    unpaired = []
    for position, char in enumerate(text):
        if char in "([{":
            stack.append((char, position))
        elif char in _CLOSES:
            opener = _CLOSES[char]
            if all(open_char != opener for open_char, _ in stack):
                unpaired.append(position)
                continue
            while stack[-1][0] != opener:
                unpaired.append(stack.pop()[1])
            stack.pop()
    return sorted(unpaired + [position for _, position in stack])


def _explained(line: str, positions: list[int]) -> int:
    """How many of the unpaired `positions` an enumerator, an emoticon, an interval or a quotation covers."""
    covered: set[int] = set()
    for match in _BRACKET_LOOKALIKES.finditer(line, pos=max(0, positions[0] - 40)):
        covered.update(range(match.start(), match.end()))
    return sum(position in covered for position in positions)


def _opens_as_prose(line: str) -> bool:
    head = line.split(maxsplit=PROSE_HEAD_WORDS)[:PROSE_HEAD_WORDS]
    return len(head) == PROSE_HEAD_WORDS and all(_PLAIN_WORD.match(word) for word in head)
