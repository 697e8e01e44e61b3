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
    continuation: bool = False
    """The rest of an entity that began in an earlier text (the previous message, content part or stream chunk):
    redacted to nothing under placeholder style, since the placeholder went where the entity began."""

    def shifted(self, offset: int) -> Finding:
        return Finding(self.entity, self.start + offset, self.end + offset, self.score, self.continuation)


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
        pieces.append(replacement(finding, finding.end - finding.start, style))
        cursor = finding.end
    pieces.append(text[cursor:])
    return "".join(pieces)


def replacement(finding: Finding, length: int, style: str) -> str:
    """What `length` characters of a finding become: its placeholder where it begins, nothing after; or stars."""
    if style != "placeholder":
        return "*" * length
    return "" if finding.continuation else f"<{finding.entity}>"
