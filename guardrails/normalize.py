"""The text a reader sees, for PII scanning: invisible characters removed and compatibility forms folded (NFKC).

A model reads an address with zero-width spaces inside it, or with a fullwidth at sign, and a card number in
fullwidth digits, as the plain address and number; Presidio's patterns do not. So the scanner reads a normalized
copy, and each finding maps back to the span of the original text it came from, which is what gets redacted:

- removed: format characters (`\\p{Cf}`: zero-width space/joiners, word joiner, soft hyphen, bidi controls, BOM),
  variation selectors, the combining grapheme joiner and the Hangul fillers, all of which render as nothing;
- decoded: Unicode tag characters (U+E0020..E007E, invisible "ASCII smuggling") to the ASCII they encode;
- folded: everything else NFKC changes (fullwidth letters, digits and `@`, ligatures, superscripts, circled
  digits).

Cost: an ASCII text (the common case) is returned as it is after one C-speed `isascii()`; other texts are only
walked character by character when NFKC or the invisible set would change them.
"""

from __future__ import annotations

import bisect
import unicodedata
from dataclasses import dataclass, field

import regex

_INVISIBLE = regex.compile(r"[\p{Cf}\u034f\u115f\u1160\u3164\uffa0\u180b-\u180d\ufe00-\ufe0f\U000e0100-\U000e01ef]")
_NON_ASCII = regex.compile(r"[^\x00-\x7f]")
_TAG_FIRST, _TAG_LAST, _TAG_OFFSET = 0xE0020, 0xE007E, 0xE0000


@dataclass(frozen=True, slots=True)
class Normalized:
    """`text` is the normalized text; offsets into it map back to the original through `original_start/_end`.

    Changed characters are kept as replacements: normalized `[norm_starts[k], norm_starts[k] + norm_lens[k])` came
    from the original character at `orig_starts[k]`; between replacements the texts run in step, shifted."""

    text: str
    norm_starts: list[int] = field(default_factory=list)
    norm_lens: list[int] = field(default_factory=list)
    orig_starts: list[int] = field(default_factory=list)
    shifts: list[int] = field(default_factory=list)
    """original offset - normalized offset, after replacement k."""

    @property
    def unchanged(self) -> bool:
        return not self.norm_starts

    def original_start(self, position: int) -> int:
        """The original offset of normalized offset `position` taken as a span start."""
        if not self.norm_starts:
            return position
        k = bisect.bisect_right(self.norm_starts, position) - 1
        if k >= 0 and position < self.norm_starts[k] + self.norm_lens[k]:
            return self.orig_starts[k]
        return position + (self.shifts[k] if k >= 0 else 0)

    def original_end(self, position: int) -> int:
        """The original offset of normalized offset `position` taken as an exclusive span end."""
        if not self.norm_starts or position <= 0:
            return position
        last = position - 1
        k = bisect.bisect_right(self.norm_starts, last) - 1
        if k >= 0 and last < self.norm_starts[k] + self.norm_lens[k]:
            return self.orig_starts[k] + 1
        return last + (self.shifts[k] if k >= 0 else 0) + 1


def normalize(text: str) -> Normalized:
    if text.isascii() or (_INVISIBLE.search(text) is None and unicodedata.is_normalized("NFKC", text)):
        return Normalized(text)
    pieces: list[str] = []
    norm_starts: list[int] = []
    norm_lens: list[int] = []
    orig_starts: list[int] = []
    shifts: list[int] = []
    cursor = 0  # original offset copied up to
    length = 0  # normalized length so far
    for match in _NON_ASCII.finditer(text):
        i = match.start()
        char = match[0]
        replacement = _replacement(char)
        if replacement == char:
            continue
        pieces.append(text[cursor:i])
        length += i - cursor
        norm_starts.append(length)
        norm_lens.append(len(replacement))
        orig_starts.append(i)
        pieces.append(replacement)
        length += len(replacement)
        cursor = i + 1
        shifts.append(cursor - length)
    pieces.append(text[cursor:])
    return Normalized("".join(pieces), norm_starts, norm_lens, orig_starts, shifts)


def _replacement(char: str) -> str:
    code = ord(char)
    if _TAG_FIRST <= code <= _TAG_LAST:
        return chr(code - _TAG_OFFSET)
    if _INVISIBLE.match(char) is not None:
        return ""
    return unicodedata.normalize("NFKC", char)
