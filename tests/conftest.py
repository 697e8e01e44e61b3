"""Fixtures shared by every test package: tiny models built once per test run (never downloaded)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """The `tiny` llama preset (vocab 512, 2 layers, GQA 4:2) with a trained byte-level BPE and a chat template."""
    from engine.tiny_model import make_tiny_model

    return str(make_tiny_model(tmp_path_factory.mktemp("tiny-llama"), preset="tiny", arch="llama"))
