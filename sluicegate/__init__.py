"""Sluicegate: shared, torch-free pieces (CLI dispatch, block hashing) used by both the gateway and the engine.

The version lives in pyproject.toml only; `sluicegate --version` reads it from the installed distribution.
"""
