"""Addresses spelled out for a reader: `john.doe at example dot com`, `john [at] example [dot] com`,
`john(at)example(dot)org`, `john dot doe at example.com`. A model reads them as the address; Presidio's email
pattern needs the `@` and the dots.

`spelled_runs(text)` finds a local part, an "at" and a domain of two or more labels joined by "dot" or ".": a
bracketed "[at]" with any dots, or a plain " at " with a spelled " dot " ("I work at example.com" is no address; a
plain address is the scanner's own), and a top-level domain from COMMON_TLDS. "look at this dot com bubble" still
reads as an address: the price of catching the spelled ones. The run decodes
to the address; a finding over it redacts the whole spelled run (as for base64 runs, encoded.py).
"""

from __future__ import annotations

import re

from guardrails.encoded import MAX_RUNS, EncodedRun

COMMON_TLDS = frozenset(
    "com org net edu gov mil int io co ai dev app info biz me us uk de fr es it nl be ch at se no dk fi pl pt ie eu "
    "ca au nz jp cn in br mx ru za".split()
)
_AT = r"(?:\s*[\[({<]\s*at\s*[\])}>]\s*|\s+at\s+|@)"
_DOT = r"(?:\s*[\[({<]\s*dot\s*[\])}>]\s*|\s+dot\s+|\.)"
# The local part may be spelled too ("john dot doe at ..."): its labels hold no dot, so a run splits one way only,
# and at most five of them, so a text of "x dot x dot ..." costs each word a bounded look, not the rest of the text.
# A run starts only where no label character precedes it and its labels are possessive: with `\b`, "a-a-a-..." was
# a start after every "-", each reading the rest of the run (2.9 s on 20 KB, holding the GIL); now 0.5 ms.
_LOCAL_LABEL = r"[a-z0-9_%+-]++"
_RUN = re.compile(
    rf"(?i)(?<![a-z0-9_%+-])((?=[a-z0-9]){_LOCAL_LABEL}(?:{_DOT}{_LOCAL_LABEL}){{0,4}}){_AT}"
    rf"([a-z0-9-]++(?:{_DOT}[a-z0-9-]++)+)"
)
_DOT_ONLY = re.compile(_DOT, re.IGNORECASE)
_BRACKETED_AT = re.compile(r"(?i)[\[({<]\s*at\s*[\])}>]")
_SPELLED_DOT = re.compile(r"(?i)[\[({<]\s*dot\s*[\])}>]|\sdot\s")


def spelled_runs(text: str) -> list[EncodedRun]:
    lowered = text.lower()
    if "at" not in lowered or ("dot" not in lowered and "." not in lowered):  # cheap exit for most texts
        return []
    runs: list[EncodedRun] = []
    for match in _RUN.finditer(text):
        if len(runs) >= MAX_RUNS:
            break
        # "[at]" with any dot, or a plain " at " with a spelled dot: "I work at example.com" is no address, and a
        # plain address is the scanner's own
        if not (_BRACKETED_AT.search(match[0]) or (_SPELLED_DOT.search(match[0]) and "@" not in match[0])):
            continue
        labels = _DOT_ONLY.split(match[2])
        if labels[-1].lower() not in COMMON_TLDS:
            continue
        local = ".".join(_DOT_ONLY.split(match[1]))
        runs.append(EncodedRun(match.start(), match.end(), f"{local}@{'.'.join(labels)}"))
    return runs
