"""Find encoded payloads (base64, hex, URL-encoding, rot13, reversed text) and decode them so the rules can read them
too."""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse

# stdlib `re`: these simple classes scan ~10x faster than with the `regex` module; the look-behind starts a match
# only at the beginning of a run, not at every character inside it.
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/_\-])[A-Za-z0-9+/_\-]{16,}={0,2}")
_HEX = re.compile(r"\b(?:[0-9a-fA-F]{2}[ :]?){12,}\b")
_PERCENT = re.compile(r"(?:%[0-9a-fA-F]{2}){4,}")
_MIN_PRINTABLE_FRACTION = 0.9
_MAX_PAYLOADS = 8
# rot13 of words every English sentence has ("the", "and", "you", "ignore", "instructions", "prompt"): only text
# containing them is worth decoding and rescanning.
_ROT13_HINT = re.compile(r"\b(?:gur|naq|lbh|vtaber|vafgehpgvbaf|cebzcg|flfgrz)\b", re.IGNORECASE)
# Reversed words of the same kind ("uoy", "ruoy", "erongi", "tpmorp", "snoitcurtsni", and the German and Spanish
# "negnusiewna", "senoiccurtsni"): text written backwards to be read backwards ("tpmorp metsys ruoy laever").
_REVERSED_HINT = re.compile(
    r"\b(?:uoy|ruoy|erongi|snoitcurtsni|tpmorp|metsys|drowssap|terces|negnusiewna|senoiccurtsni)\b", re.IGNORECASE
)
_ROT13 = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", "NOPQRSTUVWXYZABCDEFGHIJKLMnopqrstuvwxyzabcdefghijklm"
)


def decoded_payloads(text: str) -> list[str]:
    """Readable text hidden in `text`: each base64/hex/percent-encoded run that decodes to printable text, and the
    rot13 or the reverse of the whole text when it looks rot13-encoded or written backwards."""
    payloads: list[str] = []
    for match in _BASE64.finditer(text):
        if len(payloads) >= _MAX_PAYLOADS:
            break
        _append_printable(payloads, _b64decode(match[0]))
    for match in _HEX.finditer(text):
        _append_printable(payloads, _hexdecode(match[0]))
    if _PERCENT.search(text):
        _append_printable(payloads, urllib.parse.unquote(text).encode())
    if _ROT13_HINT.search(text):
        payloads.append(text.translate(_ROT13))
    if _REVERSED_HINT.search(text):
        payloads.append(text[::-1])
    return payloads


def _b64decode(token: str) -> bytes:
    token = token.rstrip("=")
    try:
        return base64.urlsafe_b64decode(token.replace("+", "-").replace("/", "_") + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        return b""


def _hexdecode(token: str) -> bytes:
    try:
        return bytes.fromhex(token.replace(" ", "").replace(":", ""))
    except ValueError:
        return b""


def _append_printable(payloads: list[str], raw: bytes) -> None:
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return
    readable = sum(c.isprintable() or c.isspace() for c in decoded)
    if len(decoded) >= 8 and readable >= _MIN_PRINTABLE_FRACTION * len(decoded):
        payloads.append(decoded)
