"""Kernel tests run the Triton kernels in Triton's CPU interpreter, so the flag must be set before any kernel module
is imported (triton.jit picks the interpreter at decoration time). tests/conftest.py sets it first for the whole run
(triton may be imported by other packages' tests before this file is read); setting it here too keeps this package
runnable on its own."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

from tests.kernels.interpreter_bf16 import patch_interpreter_bf16  # noqa: E402

patch_interpreter_bf16()
