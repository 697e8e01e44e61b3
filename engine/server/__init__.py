"""The replica's OpenAI-compatible HTTP server (docs/architecture.md, "Engine replica HTTP API"): `create_app` wraps
a loaded LLMEngine; `sluicegate engine` (cli.py) runs it under uvicorn."""
