"""What a chat request asks of tools: the definitions its chat template renders, and what its output may hold.

tool_choice   "none": the tools are rendered, nothing is parsed (the reply is text)
              "auto" (the default with tools): the model decides; its text is parsed, not constrained
              "required" / {"type": "function", "function": {"name": ...}}: exactly one call, forced by a grammar in the
              parser's format (docs/api.md, "Tool calling")
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from engine.errors import RequestError
from engine.structured.spec import GrammarSpec
from engine.tools.parsers import ToolParser


class ToolChoice(enum.Enum):
    NONE = "none"
    AUTO = "auto"
    REQUIRED = "required"
    NAMED = "named"


@dataclass(frozen=True)
class ToolPlan:
    tools: list[dict[str, Any]]  # as the client sent them: what the chat template renders
    choice: ToolChoice
    function: str | None = None  # the named function (ToolChoice.NAMED)

    @property
    def parses(self) -> bool:
        return self.choice is not ToolChoice.NONE

    def grammar(self, parser: ToolParser) -> GrammarSpec | None:
        if self.choice is ToolChoice.REQUIRED:
            return parser.forced([tool["function"] for tool in self.tools])
        if self.choice is ToolChoice.NAMED:
            return parser.forced([tool["function"] for tool in self.tools if tool["function"]["name"] == self.function])
        return None


def tool_plan(tools: list[dict[str, Any]] | None, tool_choice: str | dict[str, Any] | None) -> ToolPlan | None:
    """None when the request has no tools. Raises RequestError (a 400 naming the field) for a choice the tools
    cannot meet."""
    if not tools:
        if tool_choice is not None and tool_choice not in ("none", "auto"):  # those two without tools: plain text
            raise RequestError("tool_choice needs tools: give the functions in 'tools'.", param="tool_choice")
        return None
    names = [tool["function"]["name"] for tool in tools]
    if len(set(names)) != len(names):
        raise RequestError("Each function in 'tools' needs its own name.", param="tools")
    if tool_choice is None:
        return ToolPlan(tools, ToolChoice.AUTO)
    if isinstance(tool_choice, str):
        return ToolPlan(tools, ToolChoice(tool_choice))
    name = tool_choice["function"]["name"]
    if name not in names:
        raise RequestError(f"tool_choice names function {name!r}, which is not in 'tools'.", param="tool_choice")
    return ToolPlan(tools, ToolChoice.NAMED, name)
