"""`sluicegate bench engine --systems`: each name runs its system (ours-invariant is ours with batch_invariant,
ours-async ours with async_output_processing), and an unknown name is a usage error before anything is built."""

import argparse

import pytest

from bench.engine import RUNNERS, main, run_ours_async, run_ours_invariant


def test_an_unknown_system_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--systems", "ours,vllm"])
    assert exit_info.value.code == 2
    assert "unknown vllm" in capsys.readouterr().err


def test_ours_invariant_generates_what_ours_does(tiny_model_dir):
    args = argparse.Namespace(max_num_seqs=4, max_num_batched_tokens=64)
    work = {"prompts": [[5, 6, 7, 8], list(range(10, 40))], "output_lens": [3, 5]}
    ours = RUNNERS["ours"](tiny_model_dir, work, args)
    invariant = run_ours_invariant(tiny_model_dir, work, args)
    assert ours["output_tokens"] == invariant["output_tokens"] == 8
    assert len(invariant["ttft_s"]) == 2


def test_ours_async_generates_what_ours_does(tiny_model_dir):
    args = argparse.Namespace(max_num_seqs=4, max_num_batched_tokens=64)
    work = {"prompts": [[5, 6, 7, 8], list(range(10, 40))], "output_lens": [3, 5]}
    assert run_ours_async(tiny_model_dir, work, args)["output_tokens"] == 8
