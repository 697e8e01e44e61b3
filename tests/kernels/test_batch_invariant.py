"""The batch-invariant attention (kernels/batch_invariant.py): the reference's answer to float precision, and a
row's bits unchanged whatever shares its call, however its sequence is chunked, at one thread or two."""

from __future__ import annotations

import pytest
import torch

from kernels import batch_invariant, reference
from kernels.paged_cases import make_paged_case

HEADS = [(2, 3), (1, 1), (2, 4)]  # (KV heads, query heads per KV head)


@pytest.mark.parametrize(("num_kv_heads", "group"), HEADS)
def test_matches_the_reference(num_kv_heads, group):
    case = make_paged_case([1, 40, 150, 300], [1, 40, 17, 1], num_kv_heads, group, 64, 16, torch.float32, seed=1)
    args = (case.query, case.key_cache, case.value_cache, case.block_tables, case.query_start_loc, case.seq_lens)
    want = reference.paged_prefill_attention(*args, case.scale)
    got = batch_invariant.paged_prefill_attention(*args, case.scale)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)

    decode = make_paged_case([5, 64, 65, 200], [1, 1, 1, 1], num_kv_heads, group, 64, 16, torch.float32, seed=2)
    dargs = (decode.query, decode.key_cache, decode.value_cache, decode.block_tables, decode.seq_lens, decode.scale)
    torch.testing.assert_close(
        batch_invariant.paged_decode_attention(*dargs), reference.paged_decode_attention(*dargs), rtol=1e-5, atol=1e-5
    )


def _rows_of_one_sequence(case, seq: int, chunks: list[int]) -> torch.Tensor:
    """Sequence `seq`'s query rows computed chunk by chunk, as a prefill split at `chunks` sizes would."""
    start = int(case.query_start_loc[seq])
    q_len = int(case.query_start_loc[seq + 1]) - start
    seq_len = int(case.seq_lens[seq])
    out, done = [], 0
    for size in chunks:
        rows = case.query[start + done : start + done + size]
        lens = torch.tensor([seq_len - q_len + done + size], dtype=torch.int32)
        loc = torch.tensor([0, size], dtype=torch.int32)
        table = case.block_tables[seq : seq + 1]
        out.append(
            batch_invariant.paged_prefill_attention(
                rows, case.key_cache, case.value_cache, table, loc, lens, case.scale
            )
        )
        done += size
    assert done == q_len
    return torch.cat(out)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_row_gets_the_same_bits_alone_beside_others_and_in_any_chunks(threads):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        case = make_paged_case([200, 37, 300, 90], [130, 37, 1, 5], 2, 3, 64, 16, torch.float32, seed=3)
        args = (case.query, case.key_cache, case.value_cache, case.block_tables, case.query_start_loc, case.seq_lens)
        together = batch_invariant.paged_prefill_attention(*args, case.scale)
        rows = slice(0, 130)  # sequence 0: 130 query rows ending at position 199
        for chunks in ([130], [1] * 130, [16] * 8 + [2], [64, 64, 2], [7, 100, 23]):
            alone = _rows_of_one_sequence(case, 0, chunks)
            assert torch.equal(alone, together[rows]), chunks
        # Sequence 2's single query, as a decode step of its own and beside other decodes.
        decode_alone = batch_invariant.paged_decode_attention(
            case.query[167:168],
            case.key_cache,
            case.value_cache,
            case.block_tables[2:3],
            case.seq_lens[2:3],
            case.scale,
        )
        assert torch.equal(decode_alone[0], together[167])
    finally:
        torch.set_num_threads(previous)


def test_the_same_bits_at_one_thread_and_two():
    case = make_paged_case([300, 40], [100, 1], 2, 3, 64, 16, torch.float32, seed=4)
    args = (case.query, case.key_cache, case.value_cache, case.block_tables, case.query_start_loc, case.seq_lens)
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = batch_invariant.paged_prefill_attention(*args, case.scale)
        torch.set_num_threads(2)
        two = batch_invariant.paged_prefill_attention(*args, case.scale)
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(one, two)
