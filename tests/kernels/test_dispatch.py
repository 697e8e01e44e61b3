"""Backend selection: Triton on CUDA (or when asked for, under the interpreter), torch references otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import batch_invariant, reference, reference_norm_rope, triton_decode
from kernels.dispatch import get_attention_ops
from kernels.paged_cases import decode_args, make_paged_case

REPO_ROOT = Path(__file__).resolve().parents[2]  # subprocesses run modules by name from here


def test_cpu_auto_is_torch_reference():
    ops = get_attention_ops("cpu")
    assert ops.backend == "torch"
    assert ops.paged_decode_attention is reference.paged_decode_attention
    assert ops.rms_norm is reference_norm_rope.rms_norm


def test_cuda_auto_is_triton():
    ops = get_attention_ops("cuda")
    assert ops.backend == "triton"
    assert ops.paged_decode_attention is triton_decode.paged_decode_attention


def test_forced_triton_runs_on_cpu_under_interpreter():
    ops = get_attention_ops("cpu", backend="triton")
    case = make_paged_case([9], [1], 1, 2, 16, 4, torch.float32)
    torch.testing.assert_close(
        ops.paged_decode_attention(*decode_args(case)), reference.paged_decode_attention(*decode_args(case))
    )


def test_batch_invariant_is_the_cpu_torch_set_with_its_own_attention():
    ops = get_attention_ops("cpu", batch_invariant=True)
    assert ops.backend == "batch_invariant"
    assert ops.paged_decode_attention is batch_invariant.paged_decode_attention
    assert ops.paged_prefill_attention is batch_invariant.paged_prefill_attention
    assert ops.write_kv_cache is reference.write_kv_cache
    for device, backend in (("cuda", "auto"), ("cpu", "triton")):
        with pytest.raises(ValueError, match="batch_invariant runs on CPU"):
            get_attention_ops(device, backend=backend, batch_invariant=True)


def test_unknown_backend_is_rejected_with_choices():
    with pytest.raises(ValueError, match="backend='cudnn'.*auto"):
        get_attention_ops("cuda", backend="cudnn")


def test_import_and_fallback_without_triton():
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import kernels, kernels.reference, kernels.reference_norm_rope\n"
        "from kernels.dispatch import get_attention_ops\n"
        "assert get_attention_ops('cuda').backend == 'torch'\n"
        "try:\n    get_attention_ops('cuda', backend='triton')\nexcept ValueError as e:\n    print('refused:', e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "refused: backend='triton' needs the triton package" in proc.stdout


def test_forced_triton_on_cpu_without_interpreter_is_refused():
    code = (
        "from kernels.dispatch import get_attention_ops\n"
        "try:\n    get_attention_ops('cpu', backend='triton')\nexcept ValueError as e:\n    print('refused:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "refused: backend='triton' on device 'cpu' needs TRITON_INTERPRET=1" in proc.stdout


def test_attention_kernels_compile_for_hopper():
    """The interpreter runs code the GPU compiler may reject; compile the main bf16 variants for sm_90 (CPU only)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # silences triton 3.9's notice; fusion on, as its default
    proc = subprocess.run(
        [sys.executable, "-m", "tests.kernels.sm90_compile"], capture_output=True, text=True, cwd=REPO_ROOT, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("compiled ") == 3, proc.stdout
