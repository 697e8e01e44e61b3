"""The CPU replicas' small-batch matmuls (engine/models/linear.py): the same product as F.linear, in every row-count
regime and whichever way the load-time timing chose, with and without a bias, contiguous like F.linear's output.
Token-exactness against transformers with them in place is tests/engine/test_greedy_equivalence.py's."""

import pytest
import torch
import torch.nn.functional as F

from engine.models.linear import (
    INVARIANT_TILE_ROWS,
    ROW_BUCKETS,
    SMALL_BATCH_ROWS,
    TimedCpuLinear,
    cpu_linear,
    invariant_linear,
    linear_for,
)


@pytest.mark.parametrize("rows", [0, 1, 2, 7, SMALL_BATCH_ROWS, SMALL_BATCH_ROWS + 1])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_f_linear(rows, with_bias):
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 48, generator=gen)
    weight = torch.randn(80, 48, generator=gen)
    bias = torch.randn(80, generator=gen) if with_bias else None
    got = cpu_linear(x, weight, bias)
    assert got.shape == (rows, 80)
    assert got.is_contiguous()
    torch.testing.assert_close(got, F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)


def test_a_view_of_rows_is_read_as_its_values():
    """The model passes slices and reshapes (attention output, the sampled rows): strides must not matter."""
    x = torch.randn(6, 96)[::2, :48]
    weight = torch.randn(32, 48)
    torch.testing.assert_close(cpu_linear(x, weight), F.linear(x, weight), rtol=1e-5, atol=1e-5)


def test_only_cpu_takes_them():
    weights = [torch.randn(64, 32), torch.randn(32, 64)]
    timed = linear_for(torch.device("cpu"), weights)
    assert isinstance(timed, TimedCpuLinear)
    assert set(timed.transposed) == {(64, 32), (32, 64)}  # every shape timed, each once
    assert all(len(choices) == len(ROW_BUCKETS) for choices in timed.transposed.values())
    assert linear_for(torch.device("cpu"), weights, batch_invariant=True) is invariant_linear
    assert linear_for(torch.device("cuda"), weights) is F.linear


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_timed_product_matches_f_linear_whichever_way_it_chose(transposed, with_bias):
    gen = torch.Generator().manual_seed(int(transposed))
    weight = torch.randn(80, 48, generator=gen)
    bias = torch.randn(80, generator=gen) if with_bias else None
    timed = TimedCpuLinear([weight])
    timed.transposed[80, 48] = (transposed,) * len(ROW_BUCKETS)  # both paths, whatever this machine timed
    for rows in (0, 1, 2, 3, 5, 8, 9, 17, SMALL_BATCH_ROWS, SMALL_BATCH_ROWS + 1):
        x = torch.randn(rows, 48, generator=gen)
        got = timed(x, weight, bias)
        assert got.shape == (rows, 80) and got.is_contiguous()
        torch.testing.assert_close(got, F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_invariant_product_gives_a_row_the_same_bits_at_any_row_count(threads):
    """The down projection's shape (K = 1,024) is where CPU BLAS sums differently past a few dozen rows."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(threads)
        x = torch.randn(300, 1024, generator=gen)
        weight = torch.randn(384, 1024, generator=gen)
        alone = torch.cat([invariant_linear(x[i : i + 1], weight) for i in range(40)])  # past a tile and a half
        for rows in (2, 5, INVARIANT_TILE_ROWS, INVARIANT_TILE_ROWS + 1, 31, 57, 100, 300):
            got = invariant_linear(x[:rows], weight)
            assert got.shape == (rows, 384) and got.is_contiguous()
            assert torch.equal(got[:40], alone[: min(rows, 40)]), rows
        torch.testing.assert_close(invariant_linear(x, weight), F.linear(x, weight), rtol=1e-4, atol=1e-4)
    finally:
        torch.set_num_threads(previous)


def test_the_timing_reads_every_matrix_in_turn_as_a_step_does(monkeypatch):
    """A pass calls one candidate on every matrix in forward order before the other candidate's pass: a matrix timed
    back to back would be hot in cache, and a step reads it cold wherever the model outgrows the cache."""
    from engine.models import linear

    weights = [torch.randn(64, 32), torch.randn(32, 64), torch.randn(64, 32)]
    calls: list[tuple[str, int]] = []
    real_call_s = linear._call_s

    def recording_call_s(product, x, weight):
        calls.append((product.__name__, next(i for i, w in enumerate(weights) if w is weight)))
        return real_call_s(product, x, weight)

    monkeypatch.setattr(linear, "_call_s", recording_call_s)
    wins = linear._transposed_wins(weights, rows=2)
    assert set(wins) == {(64, 32), (32, 64)}
    timed_calls = calls[2 * 2 :]  # after each shape's first (set-up) call with each candidate
    passes = [timed_calls[i : i + len(weights)] for i in range(0, len(timed_calls), len(weights))]
    assert len(passes) >= 6  # at least 3 rounds of the two candidates
    for index, one_pass in enumerate(passes):
        name = "linear" if index % 2 == 0 else "cpu_linear"
        assert one_pass == [(name, 0), (name, 1), (name, 2)]


def test_products_too_slow_to_time_keep_f_linear(monkeypatch):
    from engine.models import linear

    monkeypatch.setattr(linear, "UNTIMED_CALL_S", 0.0)
    timed = TimedCpuLinear([torch.randn(64, 32), torch.randn(32, 64)])
    assert timed.transposed == {(64, 32): (False,) * len(ROW_BUCKETS), (32, 64): (False,) * len(ROW_BUCKETS)}


def test_a_large_models_pass_stops_past_the_byte_cap_but_reads_every_shape(monkeypatch):
    """Past PASS_BYTES a pass reads nothing colder, only slower: the prefix of the model, then each unseen shape."""
    from engine.models import linear

    layers = [torch.zeros(64, 32), torch.zeros(32, 64)] * 4
    lm_head = torch.zeros(128, 32)
    monkeypatch.setattr(linear, "PASS_BYTES", 3 * 64 * 32 * 4)  # the first three matrices
    chosen = linear._pass_order([*layers, lm_head])
    assert [id(w) for w in chosen] == [id(w) for w in (*layers[:3], lm_head)]
    assert linear._transposed_wins([], rows=1) == {}
