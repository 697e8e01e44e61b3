"""Child process of test_compile_sm90: compiles the attention kernels' main bf16 variants for Hopper (sm_90) with
the compiler shipped in the triton wheel. No GPU needed. It catches what the interpreter cannot: code that runs in
Python but does not lower (loop-carried values changing type, dot shapes under 16, unsupported ops). Must run
without TRITON_INTERPRET, which would turn the kernels into interpreted functions."""

from __future__ import annotations

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels import triton_decode, triton_prefill

HOPPER = GPUTarget("cuda", 90, 32)


def compile_for_hopper(fn, pointer_types: dict[str, str], constexprs: dict) -> None:
    signature = {name: pointer_types.get(name, "i32") for name in fn.arg_names}
    signature.update({name: "constexpr" for name in constexprs})
    triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs), target=HOPPER)
    print(f"compiled {fn.__name__}", flush=True)


def main() -> None:
    cache = {"key_cache_ptr": "*bf16", "value_cache_ptr": "*bf16", "block_tables_ptr": "*i32", "seq_lens_ptr": "*i32"}
    compile_for_hopper(
        triton_decode._decode_partition_kernel,
        {
            **cache,
            "out_ptr": "*bf16",
            "part_out_ptr": "*fp32",
            "part_lse_ptr": "*fp32",
            "query_ptr": "*bf16",
            "scale_log2e": "fp32",
        },
        dict(
            QUERIES_PER_KV=4,
            G_PAD=16,
            HEAD_DIM=128,
            D_PAD=128,
            BLOCK_SIZE=16,
            TILE=64,
            ONE_SPLIT=False,
            DOT_PRECISION="tf32",
        ),
    )
    compile_for_hopper(
        triton_decode._decode_merge_kernel,
        {"out_ptr": "*bf16", "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32", "seq_lens_ptr": "*i32"},
        dict(HEAD_DIM=128, D_PAD=128, SPLITS_PAD=8),
    )
    compile_for_hopper(
        triton_prefill._prefill_kernel,
        {**cache, "out_ptr": "*bf16", "query_ptr": "*bf16", "query_start_loc_ptr": "*i32", "scale_log2e": "fp32"},
        dict(
            QUERIES_PER_KV=8, G_PAD=8, BLOCK_Q=8, HEAD_DIM=128, D_PAD=128, BLOCK_SIZE=16, TILE=64, DOT_PRECISION="tf32"
        ),
    )


if __name__ == "__main__":
    main()
