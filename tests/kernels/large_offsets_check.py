"""Child process of test_block_ids_past_32bit_offsets: decode, prefill and cache writes on blocks whose element
offsets exceed 2**31. The fp16 caches (4 GiB each) are allocated untouched, so they cost no memory; only the used
blocks are filled. Prints one "ok <kernel> <max error>" line per kernel; exits non-zero on a mismatch."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

from kernels import reference  # noqa: E402
from kernels.paged_cases import decode_args, make_paged_case, prefill_args  # noqa: E402
from kernels.triton_cache import write_kv_cache  # noqa: E402
from kernels.triton_decode import paged_decode_attention  # noqa: E402
from kernels.triton_prefill import paged_prefill_attention  # noqa: E402

BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM = 16, 2, 64
FIRST_BLOCK_ID = 2**31 // (BLOCK_SIZE * NUM_KV_HEADS * HEAD_DIM) + 5


def check(name: str, out: torch.Tensor, expected: torch.Tensor, atol: float) -> None:
    err = (out.float() - expected.float()).abs().max().item()
    if not err <= atol:
        raise SystemExit(f"FAIL {name}: max abs error {err} > {atol}")
    print(f"ok {name} {err:.3g}")


def main() -> None:
    case = make_paged_case(
        [40, 300], [40, 1], NUM_KV_HEADS, 4, HEAD_DIM, BLOCK_SIZE, torch.float16, first_block_id=FIRST_BLOCK_ID
    )
    assert int(case.block_tables.min()) * BLOCK_SIZE * NUM_KV_HEADS * HEAD_DIM >= 2**31
    args = prefill_args(case)
    check("prefill", paged_prefill_attention(*args), reference.paged_prefill_attention(*args), 4e-3)

    # Decode on the same cache; the tables' first blocks are the ones the prefill case filled.
    decode = (case.query[[39, 40]], *decode_args(case)[1:])
    check("decode", paged_decode_attention(*decode), reference.paged_decode_attention(*decode), 4e-3)

    slots = case.used_block_ids[:3] * BLOCK_SIZE + torch.tensor([0, 7, 15])  # [3] int64, > 2**31 / (Hkv * D)
    new_kv = torch.randn(2, 3, NUM_KV_HEADS, HEAD_DIM).to(torch.float16)
    write_kv_cache(new_kv[0], new_kv[1], case.key_cache, case.value_cache, slots)
    flat_k = case.key_cache.view(-1, NUM_KV_HEADS, HEAD_DIM)
    flat_v = case.value_cache.view(-1, NUM_KV_HEADS, HEAD_DIM)
    check("write_kv_cache", torch.stack((flat_k[slots], flat_v[slots])), new_kv, 0.0)


if __name__ == "__main__":
    main()
