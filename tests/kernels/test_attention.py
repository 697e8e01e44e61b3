"""Triton paged attention (decode and prefill) against kernels/reference.py, under the CPU interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import reference
from kernels.paged_cases import decode_args, make_paged_case, prefill_args, upcast
from kernels.triton_decode import MIN_PARTITION_TOKENS, _sm_count, plan_splits
from kernels.triton_decode import paged_decode_attention as triton_decode
from kernels.triton_prefill import paged_prefill_attention as triton_prefill

REPO_ROOT = Path(__file__).resolve().parents[2]  # subprocesses run modules by name from here

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# Max abs error against the fp32 answer on unit-variance inputs: the kernel rounds P to the cache dtype for P @ V
# and rounds its output once.
ATOL = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}
# (num_kv_heads, queries_per_kv): GQA 4:1, GQA 8:1, MQA (one KV head), MHA
HEAD_LAYOUTS = [(2, 4), (2, 8), (1, 8), (4, 1)]
HEAD_LAYOUT_IDS = ["gqa4", "gqa8", "mqa", "mha"]


def assert_close_to_exact(out: torch.Tensor, exact: torch.Tensor, dtype: torch.dtype) -> None:
    assert out.dtype == dtype and out.shape == exact.shape
    assert torch.isfinite(out.float()).all()
    err = (out.float() - exact).abs().max().item()
    assert err <= ATOL[dtype], f"max abs error {err:.3g} > {ATOL[dtype]} for {dtype}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("heads", HEAD_LAYOUTS, ids=HEAD_LAYOUT_IDS)
def test_decode_ragged_lengths(dtype, heads):
    num_kv_heads, queries_per_kv = heads
    seq_lens = [1, 16, 17, 70]  # one token, exactly one block, one past a block, several tiles
    case = make_paged_case(seq_lens, [1] * 4, num_kv_heads, queries_per_kv, 32, 16, dtype, seed=1)
    out = triton_decode(*decode_args(case))
    assert_close_to_exact(out, reference.paged_decode_attention(*upcast(decode_args(case))), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_decode_long_context_uses_split_path(dtype):
    seq_lens = [600, 300]  # the second ends inside the second of three partitions
    case = make_paged_case(seq_lens, [1, 1], 1, 8, 32, 16, dtype, seed=2)
    max_context = case.block_tables.shape[1] * 16
    num_splits, partition = plan_splits(2, 1, max_context, _sm_count(case.query.device))
    assert num_splits >= 3 and partition >= MIN_PARTITION_TOKENS
    out = triton_decode(*decode_args(case))
    assert_close_to_exact(out, reference.paged_decode_attention(*upcast(decode_args(case))), dtype)


def test_decode_odd_head_dim_and_block_size():
    case = make_paged_case([5, 41], [1, 1], 2, 3, 24, 8, torch.float32, seed=3)  # D and G not powers of two
    out = triton_decode(*decode_args(case))
    assert_close_to_exact(out, reference.paged_decode_attention(*decode_args(case)), torch.float32)


@pytest.mark.parametrize("context", [5, 600], ids=["one-split", "split-K"])
def test_decode_zero_length_padding_rows_are_zero(context):
    # CUDA-graph batches are padded with zero-length sequences: they must come out as zeros, never NaN or garbage.
    case = make_paged_case([1, context], [1, 1], 1, 4, 16, 16, torch.float32, seed=8)
    query, key_cache, value_cache, block_tables, seq_lens, scale = decode_args(case)
    padded_lens = seq_lens.clone()
    padded_lens[0] = 0
    out = triton_decode(query, key_cache, value_cache, block_tables, padded_lens, scale)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    real_row = (query[1:], key_cache, value_cache, block_tables[1:], seq_lens[1:], scale)
    assert_close_to_exact(out[1:], reference.paged_decode_attention(*real_row), torch.float32)


def test_plan_splits_only_splits_when_programs_are_few():
    assert plan_splits(num_seqs=256, num_kv_heads=8, max_context_tokens=4096, sm_count=132) == (1, 4096)
    splits, partition = plan_splits(num_seqs=1, num_kv_heads=8, max_context_tokens=32768, sm_count=132)
    assert splits > 1 and splits * partition >= 32768 and partition % 64 == 0
    assert plan_splits(num_seqs=1, num_kv_heads=1, max_context_tokens=100, sm_count=132) == (1, 100)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("heads", HEAD_LAYOUTS, ids=HEAD_LAYOUT_IDS)
def test_prefill_chunks_with_and_without_cached_prefix(dtype, heads):
    num_kv_heads, queries_per_kv = heads
    # whole prompt (no prefix), a chunk after a 45-token prefix, one token after a long prefix, a zero-length query
    seq_lens = [37, 65, 50, 9]
    query_lens = [37, 20, 1, 0]
    case = make_paged_case(seq_lens, query_lens, num_kv_heads, queries_per_kv, 32, 16, dtype, seed=4)
    out = triton_prefill(*prefill_args(case))
    assert_close_to_exact(out, reference.paged_prefill_attention(*upcast(prefill_args(case))), dtype)


def test_prefill_many_sequences_finds_each_tile():
    # Many short ragged chunks: programs must find their sequence by the binary search over query_start_loc.
    seq_lens = [3, 1, 18, 7, 33, 2, 16, 9, 1, 25]
    query_lens = [3, 1, 5, 7, 17, 2, 16, 1, 1, 25]
    case = make_paged_case(seq_lens, query_lens, 2, 2, 16, 4, torch.float32, seed=5)
    out = triton_prefill(*prefill_args(case))
    assert_close_to_exact(out, reference.paged_prefill_attention(*prefill_args(case)), torch.float32)


def test_prefill_reads_strided_query_view():
    # The model hands attention q as a view of the fused qkv projection: row stride (Hq + 2 Hkv) * D.
    case = make_paged_case([30, 12], [30, 4], 2, 4, 32, 16, torch.float32, seed=6)
    num_tokens, num_q_heads, head_dim = case.query.shape
    qkv = torch.randn(num_tokens, (num_q_heads + 4) * head_dim)
    qkv[:, : num_q_heads * head_dim] = case.query.reshape(num_tokens, -1)
    strided = qkv[:, : num_q_heads * head_dim].view(num_tokens, num_q_heads, head_dim)
    assert not strided.is_contiguous()
    args = (strided, *prefill_args(case)[1:])
    out = triton_prefill(*args)
    assert_close_to_exact(out, reference.paged_prefill_attention(*prefill_args(case)), torch.float32)


def test_block_ids_past_32bit_offsets():
    """Blocks whose element offset block_id * B * Hkv * D exceeds 2**31. 32-bit index math wraps to an address
    outside the cache and the interpreter segfaults, so the check runs in a child process: a crash fails this test
    instead of killing the session."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    command = [sys.executable, "-m", "tests.kernels.large_offsets_check"]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert proc.stdout.count("ok ") == 3, proc.stdout
