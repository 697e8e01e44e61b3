"""Runs written with escapes a model reads through: URL percent-encoding (`maria%40example.com`), JSON and Python
escapes (`maria\\u0040example.com`, `\\x40`) and HTML character references (`maria&#64;example.com`, `&#x40;`,
`&commat;`). A pattern recognizer sees `%40` where the address has its `@`.

`escaped_runs(text)` finds each run of non-space characters holding at least one escape and decodes the whole run
(percent-decoding, then backslash escapes, then HTML references); the scanner scans the decoded texts and a finding
is reported over the whole escaped run, which is what gets redacted (as for base64 runs, encoded.py).
"""

from __future__ import annotations

import html
import re
import urllib.parse

from guardrails.encoded import MAX_RUNS, EncodedRun

_ESCAPE = r"%[0-9A-Fa-f]{2}|\\u[0-9A-Fa-f]{4}|\\x[0-9A-Fa-f]{2}|&#[0-9]{1,7};|&#[xX][0-9A-Fa-f]{1,6};|&[A-Za-z]{2,8};"
_RUN = re.compile(rf"[^\s\"'<>]*?(?:{_ESCAPE})[^\s\"'<>]*")
_BACKSLASH = re.compile(r"\\u([0-9A-Fa-f]{4})|\\x([0-9A-Fa-f]{2})")
_TRIGGERS = ("%", "\\u", "\\x", "&")


def escaped_runs(text: str) -> list[EncodedRun]:
    if not any(trigger in text for trigger in _TRIGGERS):  # the common case: no escape at all, one pass per trigger
        return []
    runs: list[EncodedRun] = []
    for match in _RUN.finditer(text):
        if len(runs) >= MAX_RUNS:
            break
        decoded = _decode(match[0])
        if decoded != match[0]:
            runs.append(EncodedRun(match.start(), match.end(), decoded))
    return runs


def _decode(run: str) -> str:
    text = urllib.parse.unquote(run, errors="replace")
    text = _BACKSLASH.sub(lambda m: chr(int(m[1] or m[2], 16)), text)
    return html.unescape(text)
