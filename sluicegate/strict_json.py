"""JSON as the spec has it, for request bodies the gateway and the replicas both parse."""

from __future__ import annotations

import json
from typing import Any


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def loads(raw: bytes | str) -> Any:
    """json.loads without Python's extensions: NaN, Infinity and -Infinity raise ValueError like any other bad JSON
    (no encoder downstream writes them back, and JSON has no such values)."""
    return json.loads(raw, parse_constant=_reject_constant)
