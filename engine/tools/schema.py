"""JSON schemas of a call to the allowed functions, for forcing one with structured decoding."""

from __future__ import annotations

from typing import Any

NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}  # OpenAI: a function without `parameters`


def call_schema(functions: list[dict[str, Any]], argument_key: str, at: str = "") -> dict[str, Any]:
    """`{"name": <one of the functions>, <argument_key>: <that function's parameters>}`; one function: no anyOf.

    `at`: the JSON pointer at which the caller places this schema in the grammar's schema ("": its root). A function's
    parameters refer to their own root (`"$ref": "#/$defs/Pet"`, as pydantic and the openai client's
    pydantic_function_tool write them); nested here, those references are rebased to where the parameters now sit."""
    many = len(functions) > 1
    options = []
    for index, function in enumerate(functions):
        parameters_at = f"{at}/anyOf/{index}" if many else at
        parameters_at += "/properties/" + argument_key.replace("~", "~0").replace("/", "~1")  # a pointer's escapes
        options.append(
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "enum": [function["name"]]},
                    argument_key: rebased_refs(function.get("parameters") or NO_PARAMETERS, parameters_at),
                },
                "required": ["name", argument_key],
                "additionalProperties": False,
            }
        )
    return {"anyOf": options} if many else options[0]


def rebased_refs(schema: Any, pointer: str) -> Any:
    """A copy of `schema` with each reference into itself (`#`, `#/...`) moved under `pointer`, where the schema sits
    in a bigger one; other references (another document's, an anchor's) stay as they are. Every `$ref` key holding
    such a string is taken for a reference: one inside an enum's or default's data would be rebased too, which a
    walk that tells data from subschemas would avoid at the cost of knowing every keyword."""
    if isinstance(schema, list):
        return [rebased_refs(item, pointer) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: "#" + pointer + value[1:]
        if key == "$ref" and isinstance(value, str) and (value == "#" or value.startswith("#/"))
        else rebased_refs(value, pointer)
        for key, value in schema.items()
    }
