"""The kernels do not specialise on what changes from step to step. Triton compiles a variant per (argument == 1,
divisible by 16, 16-byte-aligned pointer) pattern; the block-table width, split counts, prefill counts and the step
buffer's region addresses change with every batch shape, and on an H100 each new variant was a ~1 s stall mid-run
(docs/benchmarks.md, GPU section). Under the CPU interpreter nothing compiles, so this checks the declarations: each
per-step argument is listed, and every listed name is a real argument (a typo would only fail on a GPU)."""

from __future__ import annotations

import pytest

from kernels import triton_cache, triton_decode, triton_norm_rope, triton_prefill

PER_STEP = {
    triton_decode._decode_partition_kernel: (
        {"num_splits", "partition_tokens", "stride_table_s"},
        {"block_tables_ptr", "seq_lens_ptr"},
    ),
    triton_decode._decode_merge_kernel: ({"num_splits", "partition_tokens"}, {"seq_lens_ptr"}),
    triton_prefill._prefill_kernel: (
        {"num_seqs", "stride_table_s"},
        {"block_tables_ptr", "query_start_loc_ptr", "seq_lens_ptr"},
    ),
    triton_cache._write_kv_cache_kernel: (set(), {"slot_mapping_ptr"}),
    triton_norm_rope._rotary_kernel: (set(), {"positions_ptr"}),
}


@pytest.mark.parametrize("kernel", list(PER_STEP), ids=lambda k: k.fn.__name__)
def test_per_step_arguments_are_not_specialised(kernel):
    values, addresses = PER_STEP[kernel]
    not_on_value = set(kernel.kwargs["do_not_specialize"] or ())
    not_on_alignment = set(kernel.kwargs["do_not_specialize_on_alignment"] or ())
    assert values <= not_on_value
    assert addresses <= not_on_alignment
    assert (not_on_value | not_on_alignment) <= set(kernel.arg_names)
