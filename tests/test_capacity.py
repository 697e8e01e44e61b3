"""The capacity planner against hand-computed numbers, and the paged-vs-contiguous seed study."""

from __future__ import annotations

import itertools
import json
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sluicegate import capacity
from sluicegate.capacity import (
    BUILTIN_MODELS,
    CapacityError,
    concurrency_study,
    derived_param_count,
    kv_bytes_per_token,
    load_model_shape,
    output_lengths,
    parse_bytes,
    plan_capacity,
)

GIB = 1 << 30


def sample_output_lengths(num: int, mean: float, cap: int, shape_alpha: float, seed: int) -> list[int]:
    return list(itertools.islice(output_lengths(mean, cap, shape_alpha, seed), num))


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    rc = capacity.main([*argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_llama_3_70b_kv_bytes_per_token_is_320_kib():
    # 2 (K, V) * 80 layers * 8 KV heads * 128 head dim * 2 bytes (bf16) = 327,680 B = 320 KiB
    assert kv_bytes_per_token(BUILTIN_MODELS["llama-3-70b"], "bf16") == 2 * 80 * 8 * 128 * 2 == 320 * 1024


def test_published_parameter_counts():
    # Published: Llama-3-8B 8.03B, Llama-3-70B 70.6B, Qwen2-7B 7.6B, Llama-2-7B 6.74B.
    assert derived_param_count(BUILTIN_MODELS["llama-3-8b"]) == 8_030_261_248
    assert derived_param_count(BUILTIN_MODELS["llama-3-70b"]) == 70_553_706_496
    assert round(derived_param_count(BUILTIN_MODELS["qwen2-7b"]) / 1e9, 2) == 7.62
    assert round(derived_param_count(BUILTIN_MODELS["llama-2-7b"]) / 1e9, 2) == 6.74


def test_llama_3_70b_plan_by_hand():
    # 160 GiB, no reserve: budget = 171,798,691,840 - 70,553,706,496 * 2 = 30,691,278,848 bytes.
    plan = plan_capacity(BUILTIN_MODELS["llama-3-70b"], 160 * GIB, "bf16", "bf16", activation_reserve_bytes=0)
    assert plan.weight_bytes == 141_107_412_992
    assert plan.kv_budget_bytes == 30_691_278_848
    assert plan.num_tokens == 30_691_278_848 // 327_680 == 93_662
    assert plan.num_blocks == 30_691_278_848 // (327_680 * 16) == 5_853


def test_tensor_parallel_splits_weights_and_kv_heads():
    shape = BUILTIN_MODELS["llama-3-70b"]
    plan = plan_capacity(shape, 80 * GIB, "bf16", "bf16", 8 * GIB, tensor_parallel=4)
    assert plan.weight_bytes == 141_107_412_992 // 4
    assert plan.kv_bytes_per_token == 320 * 1024 // 4
    # Past the number of KV heads each GPU keeps a whole (replicated) head.
    assert kv_bytes_per_token(shape, "bf16", tensor_parallel=16) == 2 * 80 * 1 * 128 * 2


def test_cli_reports_320_kib_and_the_shortfall_when_70b_does_not_fit_one_gpu(capsys):
    rc, report = run_json(capsys, "--model", "llama-3-70b", "--gpu-memory", "80GiB", "--dtype", "bf16")
    assert rc == 1
    assert report["plan"]["kv_bytes_per_token"] == 327_680
    assert report["plan"]["num_tokens"] == 0
    assert "does not fit" in report["error"] and "--tensor-parallel" in report["error"]


def test_cli_table_for_a_model_that_fits(capsys):
    assert capacity.main(["--model", "llama-3-8b", "--gpu-memory", "80GiB"]) == 0
    out = capsys.readouterr().out
    assert "KV bytes per token    131,072 (128 KiB)" in out
    assert "paged / contiguous:" in out and "MHA (32 KV heads)" in out and "GQA (8 KV heads) *" in out


def test_paged_serves_at_least_five_times_more_requests(capsys):
    rc, report = run_json(capsys, "--model", "llama-3-8b", "--gpu-memory", "80GiB", "--seed", "7")
    assert rc == 0
    contiguous, paged = report["study"]["rows"]
    assert paged["num_requests"] >= 5 * contiguous["num_requests"] > 0
    assert report["study"]["paged_over_contiguous"] >= 5
    # Paged waste is under one block per request; contiguous waste is most of every reservation.
    assert paged["reserved_tokens"] - paged["used_tokens"] < 16 * paged["num_requests"]
    assert paged["reserved_tokens"] <= report["plan"]["num_blocks"] * 16
    assert contiguous["kv_utilization"] < 0.2 < 0.9 < paged["kv_utilization"]


def test_study_is_seeded():
    args = dict(
        num_tokens=100_000,
        block_size=16,
        prompt_tokens=200,
        max_output_tokens=4096,
        mean_output_tokens=150,
        shape_alpha=1.5,
    )
    assert concurrency_study(**args, seed=3) == concurrency_study(**args, seed=3)
    assert sample_output_lengths(50, 150, 4096, 1.5, seed=1) != sample_output_lengths(50, 150, 4096, 1.5, seed=2)


def test_output_lengths_are_pareto_with_mean_150_capped_at_4096():
    lengths = sample_output_lengths(100_000, mean=150, cap=4096, shape_alpha=1.5, seed=0)
    assert max(lengths) == 4096 and min(lengths) >= 1
    assert abs(statistics.fmean(lengths) - 150) < 150 * 0.03
    # Heavy tail: the median sits well below the mean.
    assert statistics.median(lengths) < 0.8 * 150


def test_mha_needs_four_times_the_kv_of_llama_3_8b_gqa(capsys):
    rc, report = run_json(capsys, "--model", "llama-3-8b", "--gpu-memory", "80GiB")
    by_heads = {row["num_kv_heads"]: row for row in report["attention"]}
    assert by_heads[32]["kv_bytes_per_token"] == 4 * by_heads[8]["kv_bytes_per_token"] == 4 * 131_072
    assert by_heads[8]["num_tokens"] == report["plan"]["num_tokens"]
    assert by_heads[8]["paged_requests"] > 3 * by_heads[32]["paged_requests"]


def write_llama_folder(folder: Path, config: dict) -> None:
    """config.json plus a safetensors file with every tensor a Llama checkpoint holds (zeros: only shapes matter)."""
    from safetensors.numpy import save_file

    h, heads, kv_heads = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    d, inter, vocab = config["head_dim"], config["intermediate_size"], config["vocab_size"]
    shapes = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,), "lm_head.weight": (vocab, h)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (heads * d, h),
            p + "self_attn.k_proj.weight": (kv_heads * d, h),
            p + "self_attn.v_proj.weight": (kv_heads * d, h),
            p + "self_attn.o_proj.weight": (h, heads * d),
            p + "mlp.gate_proj.weight": (inter, h),
            p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
        }
    save_file(
        {name: np.zeros(shape, dtype=np.float16) for name, shape in shapes.items()}, str(folder / "model.safetensors")
    )
    (folder / "config.json").write_text(json.dumps(config))


def test_model_folder_uses_exact_safetensors_count(tmp_path, capsys):
    from engine.tiny_model import PRESETS, model_config

    write_llama_folder(tmp_path, model_config(PRESETS["tiny"], "llama", tie_word_embeddings=False, rope_scaling=None))
    shape = load_model_shape(str(tmp_path))
    assert shape.num_layers == 2 and shape.num_kv_heads == 2 and shape.head_dim == 16
    # The checkpoint's tensors hold exactly what the shape formula predicts.
    assert shape.num_params == derived_param_count(replace(shape, num_params=None)) == 139_584
    rc, report = run_json(capsys, "--model", str(tmp_path / "config.json"), "--gpu-memory", "1GiB")
    assert rc == 0
    assert report["model"]["param_count"] == 139_584
    assert report["plan"]["kv_bytes_per_token"] == 2 * 2 * 2 * 16 * 2


@pytest.mark.parametrize(
    "text, expected", [("80GiB", 80 * GIB), ("141GB", 141 * 10**9), ("1.5Gi", 3 * GIB // 2), ("512", 512)]
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "gpt-9", "--gpu-memory", "80GiB"], "neither a config.json"),
        (["--model", "llama-3-8b", "--gpu-memory", "lots"], "not understood"),
        (["--model", "llama-3-8b", "--gpu-memory", "80GiB", "--dtype", "int3"], "dtype 'int3'"),
        (["--model", "llama-3-8b", "--gpu-memory", "80GiB", "--pareto-shape", "1"], "--pareto-shape"),
    ],
)
def test_bad_input_is_a_clear_error(argv, message, capsys):
    assert capacity.main(argv) == 2
    assert message in capsys.readouterr().err


def test_config_without_shape_fields_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(CapacityError, match="num_attention_heads"):
        load_model_shape(str(tmp_path))
