"""train_pair end to end at a toy size: both folders load with transformers, share the tokenizer, and a rerun with
the same seed and step count writes the same weights."""

from __future__ import annotations

import json

import pytest
import torch

from engine.train_pair import DRAFT_PRESET, TARGET_PRESET, TrainConfig, _new_model, _train, train_pair

TOY = {
    "steps": 8, "warmup_steps": 3, "seq_len": 32, "batch_size": 4, "eval_windows": 4, "corpus_bytes": 100_000,
    "num_threads": 1,
}  # fmt: skip


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("pair")
    train_pair(out, **TOY)
    return str(out)


def test_both_models_load_with_transformers_and_share_the_tokenizer(pair_dir: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = AutoModelForCausalLM.from_pretrained(f"{pair_dir}/target")
    draft = AutoModelForCausalLM.from_pretrained(f"{pair_dir}/draft")
    assert target.config.vocab_size == draft.config.vocab_size
    assert draft.num_parameters() * 3 < target.num_parameters()
    tokenizers = [AutoTokenizer.from_pretrained(f"{pair_dir}/{name}") for name in ("target", "draft")]
    text = "def main(argv):\n    return 0\n"
    assert tokenizers[0](text).input_ids == tokenizers[1](text).input_ids
    assert tokenizers[0].decode(tokenizers[0](text).input_ids, skip_special_tokens=True) == text
    with torch.no_grad():
        ids = torch.tensor([tokenizers[0](text).input_ids])
        assert target(ids).logits.shape == draft(ids).logits.shape


def test_training_lowers_the_loss(pair_dir: str) -> None:
    info = json.loads(open(f"{pair_dir}/train_info.json").read())
    assert info["steps"] == TOY["steps"]
    for name in ("target", "draft"):
        assert info["eval_after"][f"{name}_loss"] < info["eval_before"][f"{name}_loss"]


def test_same_seed_and_steps_give_the_same_weights() -> None:
    # at the model level: rerunning all of train_pair would retrain the tokenizer too and double the test's time
    config = TrainConfig(**{**TOY, "steps": 3})
    stream = torch.arange(2000) % 97

    def run() -> tuple[dict[str, list[float]], torch.Tensor]:
        target, draft = _new_model(TARGET_PRESET, config.seed), _new_model(DRAFT_PRESET, config.seed + 1)
        losses = _train(target, draft, stream, config)
        return losses, draft.model.layers[0].mlp.down_proj.weight

    (first_losses, first_weight), (second_losses, second_weight) = run(), run()
    assert first_losses == second_losses
    assert torch.equal(first_weight, second_weight)


def test_config_errors_name_the_value() -> None:
    with pytest.raises(ValueError, match="minutes=0"):
        TrainConfig(minutes=0)
    with pytest.raises(ValueError, match="steps=0"):
        TrainConfig(steps=0)
