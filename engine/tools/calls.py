"""One parsed tool call, and the ids OpenAI's clients echo back in the `tool` message that answers it."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

CALL_ID_CHARS = 24


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object's text, as OpenAI's `function.arguments`


def new_call_id() -> str:
    return "call_" + secrets.token_hex(CALL_ID_CHARS // 2)


def call_from_object(value: Any, argument_keys: tuple[str, ...]) -> ToolCall | None:
    """`{"name": ..., <argument key>: {...}}` as a call; None for anything else (a model's JSON that is no call).
    Arguments given as a JSON string of an object (some models write them so) are taken too."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments: Any = next((value[key] for key in argument_keys if key in value), {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(value["name"], json.dumps(arguments, ensure_ascii=False))


def held_back(text: str, marker: str) -> int:
    """Characters at the end of `text` that may be the start of `marker` (not yet safe to send as content)."""
    for length in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-length:]):
            return length
    return 0
