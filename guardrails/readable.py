"""PII as a reader finds it: the scanner run on the normalized text (normalize.py) and on what its base64 runs
(encoded.py), escaped runs (escaped.py: `%40`, `\u0040`, `&#64;`) and spelled-out addresses (spelled.py: `john at
example dot com`) decode to, with findings in the original text's
offsets.

Used for whole outputs and streams (`find_readable`) and for the request's joined prompt (`find_in_normalized`,
whose text prompt_view.py has already normalized segment by segment).
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from guardrails.encoded import encoded_runs
from guardrails.escaped import escaped_runs
from guardrails.findings import Finding, resolve_overlaps
from guardrails.normalize import normalize
from guardrails.spelled import spelled_runs

if TYPE_CHECKING:
    from guardrails.pii_scanner import PiiScanner
    from guardrails.policy import GuardrailPolicy


def find_readable(scanner: PiiScanner, text: str, policy: GuardrailPolicy) -> list[Finding]:
    """Non-overlapping findings in `text` (original offsets), ordered by start."""
    normalized = normalize(text)
    found = find_in_normalized(scanner, normalized.text, policy)
    if normalized.unchanged:
        return found
    return [
        Finding(f.entity, normalized.original_start(f.start), normalized.original_end(f.end), f.score) for f in found
    ]


def find_in_normalized(scanner: PiiScanner, text: str, policy: GuardrailPolicy) -> list[Finding]:
    """Findings in an already normalized text, plus one over each base64, escaped or spelled-out run whose decoded
    text holds PII."""
    direct = scanner.scan(text, policy)
    runs = encoded_runs(text) + escaped_runs(text) + spelled_runs(text)
    if not runs:
        return direct
    # One scan over all decoded texts, joined by newlines (no entity spans one), not one per run.
    starts: list[int] = []
    pieces: list[str] = []
    length = 0
    for run in runs:
        starts.append(length)
        pieces.append(run.decoded)
        length += len(run.decoded) + 1
    decoded = normalize("\n".join(pieces))
    encoded: list[Finding] = []
    for finding in scanner.scan(decoded.text, policy):
        run = runs[bisect.bisect_right(starts, decoded.original_start(finding.start)) - 1]
        # A run inside a direct finding (a JWT's payload, a key) is already covered by it, under its own label; one
        # that only overlaps a direct finding ("\u006a\u006f\u0068n@gmail.com", where "n@gmail.com" matches as it
        # stands) is the larger finding, and resolve_overlaps keeps it whole.
        if not any(d.start <= run.start and run.end <= d.end for d in direct):
            encoded.append(Finding(finding.entity, run.start, run.end, finding.score))
    return resolve_overlaps(direct + encoded) if encoded else direct
