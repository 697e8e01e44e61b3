"""JSON schemas of a call to the allowed functions, for forcing one with structured decoding."""

from __future__ import annotations

from typing import Any

NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}  # OpenAI: a function without `parameters`


def call_schema(functions: list[dict[str, Any]], argument_key: str) -> dict[str, Any]:
    """`{"name": <one of the functions>, <argument_key>: <that function's parameters>}`; one function: no anyOf."""
    options = [
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": [function["name"]]},
                argument_key: function.get("parameters") or NO_PARAMETERS,
            },
            "required": ["name", argument_key],
            "additionalProperties": False,
        }
        for function in functions
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}
