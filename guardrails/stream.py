"""StreamRedactor: redacts PII in a streamed response while holding back only what could still become an entity.

One per response choice. Each `feed(delta)` appends to a pending buffer and returns what can be emitted now:

      emitted (kept as left context, last N chars)  |  pending                      |
      "...reach me at "                             |  "john.do"                    <- feed("do")
                                                    ^ cut: the trailing run "john.do" could still become an email

The cut is the start of the longest trailing run that could still grow into an entity: the last non-space token
(an email, key or URL continues without spaces), a run of digit groups with separators (`4111 1111 11`, a phone, an
SSN), or an IBAN's groups. When the policy asks for PERSON / LOCATION / ORGANIZATION, also a trailing run of
capitalized words ("Maria", "Maria del", "Bank of"), or of lower-case words the tagger reads as names ("sarah
kowalski"), and the two words after it: a name grows word by word, and the tagger reads two words of right context
("Jordan said" is a person, "Jordan river" a place), so a name is scanned only once those words have arrived, and a
name split over 1-3 character chunks is never sent in part. With LOCATION,
also a house number and up to five words after it ("2212 Orchard Way", "6 place de la Sonnen"): a street address
still arriving. A finding that straddles the cut moves the cut to its start, and so does a name or address finding
followed by fewer than three words: an address grows after it is first recognised ("Orchardring 49" + ", 93468
Munich", "2212 Orchard Way" + ", Delhi, WA 78878"). Everything before the cut is scanned as a reader sees it
(readable.py: normalized, base64 runs decoded) with the tenant's policy and emitted at once, redacted.
`released_chars` and `take_redactions()` tell SseRedactor which characters went out and which were redacted, so a
token's logprobs go out with, and are redacted like, its characters (logprobs.py).

Bound: the pending (held-back) text never exceeds `stream_max_holdback_chars` (default 96) characters after a
`feed` returns, for every entity type, names and addresses included; a longer run is cut at that bound (so a name or
address is whole only while it and its right context fit in that many characters). A secret longer than
that (a PEM private key, a long JWT or API key) is swallowed instead: once its start is recognised (the PEM BEGIN
line, a finding still growing at the end, or a run starting with a key prefix) the placeholder is emitted (or one `*`
per character, for masking) and the rest is dropped until the secret ends (the PEM END line, or a character no key or
JWT contains). Any other over-long unbroken run is scanned and released as it stands. Output `block` raises
OutputBlocked instead of emitting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import regex

from guardrails.errors import OutputBlocked
from guardrails.findings import Finding, redact
from guardrails.ner.recognizer import shared_model
from guardrails.pii_scanner import PiiScanner
from guardrails.policy import GuardrailPolicy
from guardrails.readable import find_readable

_TRAILING_RUN = regex.compile(r"\S+$")
_TAILS = (
    _TRAILING_RUN,
    regex.compile(r"[+(]?\d[\d().\-/ ]*$"),
    regex.compile(r"\b[A-Za-z]{2}\d{2}(?: ?[A-Za-z0-9]{1,4})* ?$"),
)
_PEM_BEGIN = regex.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = regex.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END_MAX_CHARS = 64
# A swallowed JWT or API key ends at the first character none of them contains (so "key=<JWT>;" keeps its ";", and
# a key inside JSON keeps the closing quote), not at the next whitespace.
_RUN_END = regex.compile(r"[^A-Za-z0-9_.\-]")
# An address swallowed at the end of an over-long run (a URL's query) goes on through its "@" and domain.
_RUN_END_BY_ENTITY = {"EMAIL_ADDRESS": regex.compile(r"[^\w.%+\-@']")}
# Prefixes that start a long secret: a run beginning with one is swallowed rather than released in clear.
_SECRET_PREFIXES = regex.compile(r"(?:eyJ|sk-|sk_live_|rk_live_|ghp_|gho_|ghs_|github_pat_|xox[abprs]-|AKIA|AIza)")
_SECRET_PREFIX_ENTITY = {"eyJ": "JWT"}
# A capitalized run (joined by name particles) and at most two words after it: what a name needs to be tagged as
# it will be in the whole text.
_CAPITALIZED = r"\p{Lu}[\p{L}\p{M}\d'’.&\-]*"
_NAME_PARTICLE = r"(?:of|de|del|della|la|le|von|van|der|den|du|des|da|di|dos|y|&|and|und|bin|al)"
_NAME_TAIL = regex.compile(
    rf"{_CAPITALIZED}(?:\s+(?:{_NAME_PARTICLE}\s+)*{_CAPITALIZED})*"
    r"(?:[^\w\s]{0,3}\s*[\p{L}\p{M}\d'’\-]*){0,2}[^\w\s]{0,3}\s*$"
)
_NAME_ENTITIES = frozenset({"PERSON", "LOCATION", "ORGANIZATION"})
_WORD = regex.compile(r"[\p{L}\p{M}'’\-]+")


class _LowerCaseNameTail:
    """A lower-case name the tagger reads (NerModel.lower_case_names: "priya", "kowalski") among the last three words:
    held, like a capitalized run, until two words follow it."""

    def __init__(self, names: frozenset[str]) -> None:
        self._names = names

    def search(self, window: str) -> regex.Match[str] | None:
        words = list(_WORD.finditer(window, max(0, len(window) - 96)))
        first = next((i for i in range(max(0, len(words) - 3), len(words)) if words[i][0] in self._names), None)
        if first is None:
            return None
        while first > 0 and words[first - 1][0] in self._names:  # a run of names is one name ("sarah kowalski")
            first -= 1
        return words[first]


# A spelled-out address still arriving ("john dot doe at gmail dot", "john [at] example [d"): held whole, so that no
# part of it goes out before spelled.py can read it as an address (it spans spaces, which the other tails stop at).
# An ordinary sentence is held a word or two longer at most ("look at this", "is a").
# Spaces around a mark are bounded (three), as elsewhere: a run of whitespace (code indentation) costs each start a
# short look, not the rest of the window.
_SPELLED_MARK = r"(?:\s{0,3}[\[({<]\s{0,3}(?:at|dot)\s{0,3}[\])}>]\s{0,3}|\s{1,3}(?:at|dot)\s{1,3})"
_SPELLED_MARK_ARRIVING = r"(?:\s{0,3}[\[({<]\s{0,3}(?:a|at|d|do|dot)?\s{0,3}[\])}>]?|\s{1,3}(?:a|at|d|do|dot)?)"
_SPELLED_CHAIN = rf"\b[\w%+\-]+(?:(?:{_SPELLED_MARK}|[.@])[\w%+\-]+)*"


class _SpelledAddressTail:
    """The longest trailing chain of labels joined by spelled or plain "at" and "dot", ending in a label, a mark, or a
    mark still arriving. Searched from the end (`(?r)`: ~6 us on a full window, against ~50 us forwards); as a
    reverse search stops at the first parse, the two endings are two patterns and the earlier start wins (a chain
    "john dot d" could otherwise stop at "dot" + " d")."""

    _ENDS_IN_LABEL_OR_MARK = regex.compile(rf"(?ri){_SPELLED_CHAIN}(?:{_SPELLED_MARK}|[.@])?$")
    _ENDS_IN_ARRIVING_MARK = regex.compile(rf"(?ri){_SPELLED_CHAIN}{_SPELLED_MARK_ARRIVING}$")

    def search(self, window: str) -> regex.Match[str] | None:
        matches = [
            m for m in (self._ENDS_IN_LABEL_OR_MARK.search(window), self._ENDS_IN_ARRIVING_MARK.search(window)) if m
        ]
        return min(matches, key=lambda m: m.start(), default=None)


# A house number and the words after it, up to a street type ("2212 Orchard Way", "6 place de la Sonnen"): an address
# still arriving, held so its number is not sent before the address is recognised.
_ADDRESS_START_TAIL = regex.compile(r"\b\d{1,5}[A-Za-z]?(?:[-–]\d{1,5})?,?(?:\s+[\p{L}\p{M}'’.\-/]+){0,5}\s*$")
# A name or address grows by words after it is first recognised ("Orchardring 49" + ", 93468 Munich", "Maria" +
# "Gonzalez"); one is released once this many words follow it.
_GROWTH_WORDS = 3
_WORDS_AFTER = regex.compile(rf"(?:\W*\w+\b){{{_GROWTH_WORDS}}}")
# A BEGIN line still arriving ("-----BEG", "-----BEGIN RSA PRIV"): held so the header is not sent in clear.
_PEM_BEGIN_TAIL = regex.compile(r"-----BEGIN[A-Z0-9 ]*-{0,5}$|-{1,5}[BEGIN]{0,4}$")


class _Tail(Protocol):
    def search(self, string: str, /) -> regex.Match[str] | None: ...


OnFinding = Callable[[str, str], None]
"""Called with (entity, action) for each finding acted on; the gateway counts it in metrics."""


class StreamRedactor:
    def __init__(
        self,
        scanner: PiiScanner,
        policy: GuardrailPolicy,
        context_chars: int,
        max_holdback_chars: int,
        on_finding: OnFinding | None = None,
    ) -> None:
        self.scanner = scanner
        self.policy = policy
        self.action = policy.output_pii_action
        self.context_chars = context_chars
        self.max_holdback_chars = max_holdback_chars
        self.on_finding = on_finding
        self.blocked = False
        self._context = ""  # already emitted original text: context words for the scan, never re-emitted
        self._pending = ""  # received, not yet emitted
        self._swallow_end: regex.Pattern | None = None  # set while dropping the rest of a long secret
        self._swallow_entity = ""
        self._swallow_first = False  # no piece of the secret dropped yet: the next one carries the placeholder
        self.released_chars = 0
        """Characters of the original text emitted or dropped so far: where the pending text starts."""
        self._redactions: list[Finding] = []
        self._watch_pem = "PRIVATE_KEY" in policy.pii_entities and self.action in ("redact", "block")
        names = bool(_NAME_ENTITIES & set(policy.pii_entities))
        self._tails: tuple[_Tail, ...] = (
            _TAILS
            + ((_PEM_BEGIN_TAIL,) if self._watch_pem else ())
            + ((_SpelledAddressTail(),) if "EMAIL_ADDRESS" in policy.pii_entities else ())
            + ((_NAME_TAIL, _LowerCaseNameTail(shared_model().lower_case_names)) if names else ())
            + ((_ADDRESS_START_TAIL,) if "LOCATION" in policy.pii_entities else ())
        )

    @property
    def held_chars(self) -> int:
        return len(self._pending)

    def take_redactions(self) -> list[Finding]:
        """What was redacted or dropped since the last call, in offsets of the whole original text (0 = the first
        character fed): the logprobs of those characters' tokens are redacted the same way (logprobs.py)."""
        taken, self._redactions = self._redactions, []
        return taken

    def feed(self, delta: str) -> str:
        """Append a delta; return the text that can be sent now (possibly empty). Raises OutputBlocked."""
        if self.blocked:
            raise OutputBlocked("pii")
        if self.action == "off":
            return delta
        self._pending += delta
        return self._release(final=False)

    def finish(self) -> str:
        """End of stream: scan and return everything still held back. Raises OutputBlocked."""
        if self.blocked:
            raise OutputBlocked("pii")
        if self.action == "off":
            return ""
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        if self._swallow_end is not None:
            return self._swallow(final)
        text = self._context + self._pending
        offset = len(self._context)
        if self._watch_pem:
            begin = _PEM_BEGIN.search(text)
            if begin is not None and _PEM_END.search(text, begin.end()) is None:
                return self._start_swallow(text, offset, begin.start(), "PRIVATE_KEY", _PEM_END, final)
        cut = len(text) if final else self._tail_cut(text, offset)
        if cut == offset and len(text) - offset <= self.max_holdback_chars:
            return ""  # all of it may still grow into an entity: nothing to emit, so nothing to scan yet
        findings = [f for f in find_readable(self.scanner, text, self.policy) if f.end > offset]
        for finding in sorted(findings, key=lambda f: -f.start):
            if finding.start < cut < finding.end or (not final and self._may_grow(text, finding, cut)):
                cut = max(finding.start, offset)
        if len(text) - cut > self.max_holdback_chars:
            secret = self._overlong_secret(text, findings)
            if secret is not None:
                end = _RUN_END_BY_ENTITY.get(secret[0], _RUN_END)
                return self._start_swallow(text, offset, secret[1], secret[0], end, final)
            cut = len(text) - self.max_holdback_chars
            for finding in findings:  # a complete finding across the forced cut goes out whole, redacted
                if finding.start < cut < finding.end:
                    cut = finding.end
        return self._emit(text, offset, cut, [f for f in findings if f.start < cut])

    @staticmethod
    def _may_grow(text: str, finding: Finding, cut: int) -> bool:
        """A name or address before the cut with fewer than _GROWTH_WORDS words after it: it may still grow."""
        return (
            finding.entity in _NAME_ENTITIES and finding.start < cut and _WORDS_AFTER.match(text, finding.end) is None
        )

    def _tail_cut(self, text: str, offset: int) -> int:
        """Start of the longest trailing run that could still grow into an entity (within the window)."""
        window_start = max(offset, len(text) - self.max_holdback_chars - 1)
        window = text[window_start:]
        cut = len(text)
        for tail in self._tails:
            match = tail.search(window)
            if match is not None:
                cut = min(cut, window_start + match.start())
        return cut

    def _overlong_secret(self, text: str, findings: list[Finding]) -> tuple[str, int] | None:
        """(entity, start) of a secret still growing at the end of an over-long trailing run, if any: the one that
        starts first (a JWT's `eyJ` header before a finding in its decoded payload)."""
        candidates = [(f.entity, f.start) for f in findings if f.end == len(text)]
        run = _TRAILING_RUN.search(text, max(0, len(text) - 4 * self.max_holdback_chars))
        prefix = _SECRET_PREFIXES.search(run[0]) if run is not None else None
        if run is not None and prefix is not None:
            entity = _SECRET_PREFIX_ENTITY.get(prefix[0], "API_KEY")
            if entity in self.policy.pii_entities:
                candidates.append((entity, run.start() + prefix.start()))
        return min(candidates, key=lambda candidate: candidate[1], default=None)

    def _emit(self, text: str, offset: int, cut: int, findings: list[Finding]) -> str:
        # A finding that started in already-emitted context cannot be unsent; redact the part not yet sent.
        local = [Finding(f.entity, max(f.start, offset) - offset, min(f.end, cut) - offset, f.score) for f in findings]
        for finding in local:
            self._act(finding.entity)
        out = text[offset:cut]
        if self.action == "redact" and local:
            out = redact(out, local, self.policy.redaction_style)
            self._redactions += [f.shifted(self.released_chars) for f in local]
        self.released_chars += cut - offset
        self._context = text[max(0, cut - self.context_chars) : cut]
        self._pending = text[cut:]
        return out

    def _act(self, entity: str) -> None:
        if self.on_finding is not None:
            self.on_finding(entity, self.action)
        if self.action == "block":
            self.blocked = True
            self._pending = ""
            raise OutputBlocked("pii", (entity,))

    def _start_swallow(self, text: str, offset: int, start: int, entity: str, end: regex.Pattern, final: bool) -> str:
        start = max(start, offset)
        before = self._emit(
            text[:start],
            offset,
            start,
            [f for f in find_readable(self.scanner, text[:start], self.policy) if f.end > offset],
        )
        if self.action == "detect":  # nothing to hide: count it and let the text through
            if self.on_finding is not None:
                self.on_finding(entity, self.action)
            self._pending = text[start:]
            return before + self._release_clear(final)
        self._act(entity)
        self._swallow_end = end
        self._swallow_entity = entity
        self._swallow_first = True
        self._pending = text[start:]
        placeholder = f"<{entity}>" if self.policy.redaction_style == "placeholder" else ""
        return before + placeholder + self._swallow(final)

    def _release_clear(self, final: bool) -> str:
        out, self._pending = self._pending, ""
        self.released_chars += len(out)
        self._context = out[-self.context_chars :] if self.context_chars else ""
        return out

    def _swallow(self, final: bool) -> str:
        masking = self.policy.redaction_style == "mask"
        assert self._swallow_end is not None  # called only while a secret is being dropped
        end = self._swallow_end.search(self._pending)
        if end is None:
            keep = _PEM_END_MAX_CHARS if self._swallow_end is _PEM_END and not final else 0
            # Keep the tail that could be the start of the end line; a pending text shorter than that keeps it all.
            dropped = self._pending[: max(0, len(self._pending) - keep)]
            self._pending = self._pending[len(dropped) :]
            self._dropped(len(dropped))
            return "*" * len(dropped) if masking else ""
        secret_end = end.end() if self._swallow_end is _PEM_END else end.start()
        masked = "*" * secret_end if masking else ""
        self._dropped(secret_end)
        self._swallow_end = None
        self._context = ""
        self._pending = self._pending[secret_end:]
        return masked + self._release(final)

    def _dropped(self, chars: int) -> None:
        if chars:
            start = self.released_chars
            self._redactions.append(
                Finding(self._swallow_entity, start, start + chars, 1.0, continuation=not self._swallow_first)
            )
            self._swallow_first = False
            self.released_chars += chars
