"""Fixtures shared by every test package: tiny models built once per test run (never downloaded)."""

from __future__ import annotations

import os

import pytest

# Tiny models run many small ops: one intra-op thread avoids OpenMP spin-waits that, on a 2-core machine, cost
# more than the ops themselves. Set before torch is imported; subprocess servers inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The kernel tests run the Triton kernels in Triton's CPU interpreter, which `triton.jit` picks when a function is
# decorated, triton.language's own helpers (tl.zeros, ...) included: the flag must be set before the first import of
# triton anywhere in the run, and other packages' tests import it too (transformers and torch do, when installed).
# Nothing else reads it: the engine picks Triton only on CUDA unless a test asks for it.
os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """The `tiny` llama preset (vocab 512, 2 layers, GQA 4:2) with a trained byte-level BPE and a chat template."""
    from engine.tiny_model import make_tiny_model

    return str(make_tiny_model(tmp_path_factory.mktemp("tiny-llama"), preset="tiny", arch="llama"))
