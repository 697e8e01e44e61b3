"""Base64 runs that decode to readable text: a model decodes `am9obkBleGFtcGxlLmNvbQ==` at a glance, a pattern
recognizer never sees the address inside.

`encoded_runs(text)` finds runs of the base64 alphabets (standard and URL-safe, with or without padding) of at least
MIN_RUN_CHARS, decodes each (also from offsets 1-3 into the run, when junk was glued on its front) and keeps those
that decode to mostly printable UTF-8. The scanner scans the decoded texts and reports a finding over the whole
encoded run, which is what gets redacted. Decoded text is searched again (base64 of base64), up to MAX_DEPTH levels.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

# stdlib `re`: these simple classes scan ~10x faster than with the `regex` module; the look-behind starts a match
# only at the beginning of a run, not at every character inside it.
_RUN = re.compile(r"(?<![A-Za-z0-9+/_\-])[A-Za-z0-9+/_\-]{12,}={0,2}")
MIN_RUN_CHARS = 12
"""12 base64 characters are 9 bytes: the shortest address worth hiding (`jo@ex.com`)."""
MAX_DEPTH = 2
MAX_RUNS = 32
"""Decoded runs per text, at most: a prompt full of identifiers costs a bounded number of decodes."""
_MAX_SKIPPED_CHARS = 3
_MIN_PRINTABLE_FRACTION = 0.9
_MIN_DECODED_CHARS = 6


@dataclass(frozen=True, slots=True)
class EncodedRun:
    start: int
    end: int
    decoded: str


def encoded_runs(text: str, depth: int = MAX_DEPTH) -> list[EncodedRun]:
    """Readable base64 runs in `text`; a run whose decoded text holds another run appears again with that decoded
    text (same span), so scanning every `decoded` covers both levels."""
    runs: list[EncodedRun] = []
    for match in _RUN.finditer(text):
        if len(runs) >= MAX_RUNS:
            break
        decoded = _decode(match[0].rstrip("="))
        if decoded is None:
            continue
        runs.append(EncodedRun(match.start(), match.end(), decoded))
        if depth > 1:
            runs += [
                EncodedRun(match.start(), match.end(), inner.decoded) for inner in encoded_runs(decoded, depth - 1)
            ]
    return runs


def _decode(run: str) -> str | None:
    for skip in range(min(_MAX_SKIPPED_CHARS, len(run) - MIN_RUN_CHARS) + 1):
        body = run[skip:]
        body = body[: len(body) - len(body) % 4 if len(body) % 4 == 1 else len(body)]  # 1 extra char is never valid
        try:
            raw = base64.urlsafe_b64decode(body.replace("+", "-").replace("/", "_") + "=" * (-len(body) % 4))
            decoded = raw.decode("utf-8")
        except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
            continue
        readable = sum(c.isprintable() or c.isspace() for c in decoded)
        if len(decoded) >= _MIN_DECODED_CHARS and readable >= _MIN_PRINTABLE_FRACTION * len(decoded):
            return decoded
    return None
