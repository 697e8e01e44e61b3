"""Sluicegate: shared, torch-free pieces (CLI dispatch, block hashing) used by both the gateway and the engine."""

__version__ = "0.1.0"
