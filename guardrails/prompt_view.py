"""The request as the model reads it: every text field joined into one normalized text, scanned once, findings
mapped back to the fields they came from.

A field scanned alone misses what the model sees whole: an address whose local part ends one content part and whose
domain starts the next (the engine joins a message's parts with nothing), a card number spread over two messages,
a zero-width space inside an address. So:

- each Segment (one string field) is normalized (normalize.py: NFKC, invisible characters removed);
- segments of one unit (a message's text parts) are joined with nothing, as the engine joins them; units (messages,
  names, tool-call arguments, tool descriptions, ...) are joined with a newline, as a chat template separates them;
- that text is scanned once, base64 runs decoded (readable.py);
- the seams between units are scanned once more, glued without the newline (SEAM_WINDOW_CHARS either side, windows
  that touch merged): an entity split across two messages reads whole to the model across the template's markup,
  and only a finding that crosses a seam comes from there (replacing the joined text's findings inside it), unless
  it only runs a whole finding of one unit on into the next (an address, then the next message's first word);
- each finding maps back to the segments it covers, in their original offsets; the first piece carries the
  placeholder, the rest (`continuation`) are removed, or all masked.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from guardrails.findings import Finding, resolve_overlaps
from guardrails.normalize import Normalized, normalize
from guardrails.readable import find_in_normalized

if TYPE_CHECKING:
    from guardrails.pii_scanner import PiiScanner
    from guardrails.policy import GuardrailPolicy

UNIT_SEPARATOR = "\n"
SEAM_WINDOW_CHARS = 48
"""Characters on each side of a seam scanned glued: longer than a card, an IBAN or a phone number, and than most
addresses' halves."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One string of a request that reaches the model (or the upstream): a content part, a message name, a tool
    call's arguments, a tool description, `user`, a stop sequence, a completion prompt or suffix."""

    text: str
    unit: int
    """Segments with the same unit, adjacent, are read as one string (a message's text parts)."""
    untrusted: bool = True
    """Scored for prompt injection (what users and tools wrote), not only for PII."""
    redactable: bool = True
    """False for identifiers (a tool's function name): PII there cannot be replaced, so `redact` blocks instead."""


class PromptView:
    def __init__(self, segments: Sequence[Segment]) -> None:
        self.segments = segments
        self.normalized: list[Normalized] = [normalize(s.text) for s in segments]
        self.starts: list[int] = []
        self.separators: list[int] = []
        """Offsets in `text` of the newlines between units."""
        pieces: list[str] = []
        position = 0
        for i, (segment, normalized) in enumerate(zip(segments, self.normalized, strict=True)):
            if i and segment.unit != segments[i - 1].unit:
                self.separators.append(position)
                pieces.append(UNIT_SEPARATOR)
                position += 1
            self.starts.append(position)
            pieces.append(normalized.text)
            position += len(normalized.text)
        self.text = "".join(pieces)

    def scan(self, scanner: PiiScanner, policy: GuardrailPolicy) -> tuple[tuple[Finding, ...], ...]:
        """Per segment, the PII found in it (original offsets), ordered by start."""
        joined = find_in_normalized(scanner, self.text, policy)
        # A seam finding that contains the joined text's findings it overlaps replaces them ("john" + ".doe@x.com":
        # the joined text sees only "doe@x.com"); one that cuts through a finding loses to it.
        # One that only runs a whole finding of its unit on into the next unit is dropped: "jane@acme.com." then a
        # message opening "how ..." glue into an address at the real domain .how, but the address ended in its unit.
        seams = [
            f
            for f in self._seam_findings(scanner, policy)
            if all(f.start <= j.start and j.end <= f.end for j in joined if j.start < f.end and f.start < j.end)
            and not any(self._runs_on(f, j) for j in joined)
        ]
        found = seams + [j for j in joined if not any(f.start <= j.start and j.end <= f.end for f in seams)]
        per_segment: list[list[Finding]] = [[] for _ in self.segments]
        for finding in found:
            for index, piece in self.locate(finding):
                per_segment[index].append(piece)
        return tuple(tuple(resolve_overlaps(pieces)) if pieces else () for pieces in per_segment)

    def _runs_on(self, seam_finding: Finding, finding: Finding) -> bool:
        """`seam_finding` is `finding` (same entity, same start) carried on past the end of its unit."""
        return (
            finding.entity == seam_finding.entity
            and finding.start == seam_finding.start
            and any(finding.end <= s < seam_finding.end for s in self.separators)
        )

    def locate(self, finding: Finding) -> list[tuple[int, Finding]]:
        """(segment index, piece in that segment's original offsets) for each segment the finding covers."""
        pieces: list[tuple[int, Finding]] = []
        index = max(0, bisect.bisect_right(self.starts, finding.start) - 1)
        while index < len(self.segments) and self.starts[index] < finding.end:
            start = self.starts[index]
            normalized = self.normalized[index]
            lo, hi = max(finding.start, start), min(finding.end, start + len(normalized.text))
            if lo < hi:
                piece = Finding(
                    finding.entity,
                    normalized.original_start(lo - start),
                    normalized.original_end(hi - start),
                    finding.score,
                    continuation=bool(pieces),
                )
                pieces.append((index, piece))
            index += 1
        return pieces

    def _seam_findings(self, scanner: PiiScanner, policy: GuardrailPolicy) -> list[Finding]:
        """Findings that cross a seam between units when the units are glued together, in `text` offsets."""
        if not self.separators:
            return []
        # Glued offsets: `text` without the separators; seam k sits at glued offset separators[k] - k.
        seams = [offset - k for k, offset in enumerate(self.separators)]
        glued = self._glued()
        windows: list[list[int]] = []
        for seam in seams:
            lo, hi = max(0, seam - SEAM_WINDOW_CHARS), min(len(glued), seam + SEAM_WINDOW_CHARS)
            if windows and lo <= windows[-1][1]:
                windows[-1][1] = hi
            else:
                windows.append([lo, hi])
        window_starts: list[int] = []  # offsets of the windows in the scanned text
        position = 0
        for lo, hi in windows:
            window_starts.append(position)
            position += hi - lo + 1
        scanned = UNIT_SEPARATOR.join(glued[lo:hi] for lo, hi in windows)
        found: list[Finding] = []
        for finding in find_in_normalized(scanner, scanned, policy):
            w = bisect.bisect_right(window_starts, finding.start) - 1
            lo, hi = windows[w]
            start = finding.start - window_starts[w] + lo
            end = finding.end - window_starts[w] + lo
            if end > hi:  # across two windows' joining newline: not a seam finding
                continue
            if any(start < seam < end for seam in seams):
                text_start, text_end = self._from_glued(start, seams), self._from_glued(end - 1, seams) + 1
                found.append(Finding(finding.entity, text_start, text_end, finding.score))
        return found

    def _glued(self) -> str:
        pieces: list[str] = []
        previous = 0
        for offset in self.separators:
            pieces.append(self.text[previous:offset])
            previous = offset + 1
        pieces.append(self.text[previous:])
        return "".join(pieces)

    @staticmethod
    def _from_glued(offset: int, seams: list[int]) -> int:
        """`text` offset of the character at glued `offset`: one more for every separator before it."""
        return offset + bisect.bisect_right(seams, offset)
