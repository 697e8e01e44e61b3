"""Tool calling: OpenAI's `tools` / `tool_choice` on /v1/chat/completions, as vLLM serves them.

request (server/protocol.py) -> ToolPlan (plan.py): the tools for the chat template, the choice, and for `required`
                                or a named function a GrammarSpec of one call in the parser's format (schema.py), so
                                even a weak model's output is a valid call
output text                  -> a ToolParser (parsers.py; `--tool-call-parser`: llama3_json, hermes, mistral) finds the
                                calls; response.py shapes them as `message.tool_calls` or as OpenAI's stream deltas
"""
