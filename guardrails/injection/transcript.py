"""Many-shot jailbreaking (Anil et al. 2024): a transcript of a model complying with request after request ("A:
Sure! First remove the steering column cover..."), ending on an open answer for the model to fill. The examples
teach the compliance the attack wants; the open label asks for one more.

A structural check, not a rule: the pattern (two or more compliant answers, then an open label at the very end) as
one regex backtracks without bound on a long transcript, while this reads the last line once and the answers with
one linear scan. Benign neighbours: a few-shot classifier ends on an open label too, but its answers are labels
("Sentiment: positive"), and an FAQ's answers comply ("A: Sure! Within 30 days.") but none is left open.
"""

from __future__ import annotations

from itertools import islice

import regex

MIN_COMPLIANT_ANSWERS = 2

_LABEL = r"(?:a|answer|assistant|ai|bot|model|output|response|r|respuesta|antwort|asistente)"
_COMPLIANT_ANSWER = regex.compile(
    rf"^[ \t]*{_LABEL}[ \t]*:[ \t]*[\"“¡]?[ \t]*(?:sure|of\s+course|certainly|absolutely|no\s+problem|here\s+(?:it\s+)?is"
    r"|klar|natürlich|gerne|claro|por\s+supuesto|desde\s+luego)\b",
    regex.IGNORECASE | regex.MULTILINE,
)
_OPEN_ANSWER = regex.compile(rf"[ \t]*{_LABEL}[ \t]*:[ \t]*", regex.IGNORECASE)


def ends_in_compliance_transcript(text: str) -> bool:
    last_line = text.rstrip().rpartition("\n")[2]
    if not _OPEN_ANSWER.fullmatch(last_line):
        return False
    answers = islice(_COMPLIANT_ANSWER.finditer(text), MIN_COMPLIANT_ANSWERS)
    return sum(1 for _ in answers) >= MIN_COMPLIANT_ANSWERS
