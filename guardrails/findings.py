"""A detected entity as the rest of the system sees it: type, span and score, never the matched value."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Finding:
    entity: str
    start: int
    """Character offset in the scanned text (inclusive)."""
    end: int
    """Character offset in the scanned text (exclusive)."""
    score: float

    def shifted(self, offset: int) -> Finding:
        return Finding(self.entity, self.start + offset, self.end + offset, self.score)


def resolve_overlaps(findings: list[Finding]) -> list[Finding]:
    """Keep the best of overlapping findings (higher score, then longer span, then entity name: ties must not
    depend on recognizer order), ordered by start.

    A value often matches several recognizers (an SSN is also a plausible phone number); redaction needs one label
    per span.
    """
    kept: list[Finding] = []
    for finding in sorted(findings, key=lambda f: (-f.score, f.start - f.end, f.start, f.entity)):
        if all(finding.end <= k.start or finding.start >= k.end for k in kept):
            kept.append(finding)
    kept.sort(key=lambda f: f.start)
    return kept


def redact(text: str, findings: list[Finding], style: str) -> str:
    """Replace each (non-overlapping, start-ordered) finding: `<ENTITY>` placeholders, or `*` of the same length."""
    pieces: list[str] = []
    cursor = 0
    for finding in findings:
        pieces.append(text[cursor : finding.start])
        pieces.append(f"<{finding.entity}>" if style == "placeholder" else "*" * (finding.end - finding.start))
        cursor = finding.end
    pieces.append(text[cursor:])
    return "".join(pieces)
