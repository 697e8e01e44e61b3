"""`sluicegate make-tiny-model DIR`: a deterministic random-weight Llama-family model and a byte-level BPE tokenizer
trained offline on the Python standard library's own sources, saved as a Hugging Face folder that both our engine
and transformers load. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

# Llama-3 style chat template (header tokens, <|eot_id|> ends each turn). Tools render as a system turn of their JSON
# schemas and an assistant's tool calls as Llama 3's JSON ({"name": ..., "parameters": ...}, several joined by "; "),
# the format of `--tool-call-parser llama3_json`, which `sluicegate up` starts its replicas with; without tools or
# tool calls the prompt is the plain conversation.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}<|start_header_id|>system<|end_header_id|>\n\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}<|eot_id|>{% endif %}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{{ (message['content'] or '') | trim }}"
    "{% for call in message.tool_calls or [] %}{% if not loop.first %}; {% endif %}"
    '{"name": "{{ call.function.name }}", "parameters": {{ call.function.arguments | tojson }}}'
    "{% endfor %}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


@dataclass(frozen=True)
class Preset:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    max_position_embeddings: int = 4096


PRESETS = {
    "tiny": Preset(vocab_size=512, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128),
    "small": Preset(
        vocab_size=4096, hidden_size=384, num_layers=6, num_heads=6, num_kv_heads=2, intermediate_size=1024
    ),
    "medium": Preset(
        vocab_size=8192, hidden_size=768, num_layers=12, num_heads=12, num_kv_heads=4, intermediate_size=2048
    ),
}
ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}


def training_corpus(max_bytes: int = 4 << 20) -> list[str]:
    """Text every machine has offline: the standard library's .py files, in a fixed order."""
    stdlib = Path(os.__file__).parent
    texts, total = [], 0
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text)
        total += len(text)
        if total >= max_bytes:
            break
    return texts


@functools.lru_cache(maxsize=4)
def train_tokenizer(vocab_size: int):
    """A byte-level BPE (GPT-2 style pre-tokenizer, so every byte string round-trips). Memoised: tests build
    several models with one vocabulary and training is the slow part."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_corpus(), trainer=trainer)
    return tokenizer


def _copy(tokenizer):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(tokenizer.to_str())


def model_config(preset: Preset, arch: str, tie_word_embeddings: bool, rope_scaling: str | None) -> dict:
    head_dim = preset.hidden_size // preset.num_heads
    config = {
        "architectures": [ARCHITECTURES[arch]],
        "model_type": arch,
        "vocab_size": preset.vocab_size,
        "hidden_size": preset.hidden_size,
        "intermediate_size": preset.intermediate_size,
        "num_hidden_layers": preset.num_layers,
        "num_attention_heads": preset.num_heads,
        "num_key_value_heads": preset.num_kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": preset.max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": tie_word_embeddings,
        "bos_token_id": 0,
        "eos_token_id": [1, 4],  # <|end_of_text|>, <|eot_id|>
        "torch_dtype": "float32",
        "initializer_range": 0.02,
    }
    if arch == "llama":
        config["attention_bias"] = False
        config["mlp_bias"] = False
    if arch == "mistral":
        config["sliding_window"] = None
    if arch == "qwen2":
        config["use_sliding_window"] = False
        config["sliding_window"] = None
        config["max_window_layers"] = preset.num_layers
    if rope_scaling == "llama3":
        config["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 256,
        }
        config["rope_theta"] = 500000.0
    return config


def random_weights(config: dict, seed: int) -> dict:
    """HF-named tensors. lm_head gets a larger scale than usual so that logits are far apart: greedy decoding on
    random weights then has no near-ties that float reordering could flip between implementations."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv_heads, head_dim = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    qkv_bias = config["model_type"] == "qwen2"

    def normal(*shape: int, std: float = 0.02) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * std

    tensors = {"model.embed_tokens.weight": normal(config["vocab_size"], hidden, std=1.0)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = 1.0 + normal(hidden, std=0.1)
        tensors[p + "post_attention_layernorm.weight"] = 1.0 + normal(hidden, std=0.1)
        tensors[p + "self_attn.q_proj.weight"] = normal(heads * head_dim, hidden, std=0.1)
        tensors[p + "self_attn.k_proj.weight"] = normal(kv_heads * head_dim, hidden, std=0.1)
        tensors[p + "self_attn.v_proj.weight"] = normal(kv_heads * head_dim, hidden, std=0.1)
        tensors[p + "self_attn.o_proj.weight"] = normal(hidden, heads * head_dim, std=0.1)
        if qkv_bias:
            tensors[p + "self_attn.q_proj.bias"] = normal(heads * head_dim, std=0.1)
            tensors[p + "self_attn.k_proj.bias"] = normal(kv_heads * head_dim, std=0.1)
            tensors[p + "self_attn.v_proj.bias"] = normal(kv_heads * head_dim, std=0.1)
        tensors[p + "mlp.gate_proj.weight"] = normal(inter, hidden, std=0.1)
        tensors[p + "mlp.up_proj.weight"] = normal(inter, hidden, std=0.1)
        tensors[p + "mlp.down_proj.weight"] = normal(hidden, inter, std=0.1)
    tensors["model.norm.weight"] = 1.0 + normal(hidden, std=0.1)
    if not config["tie_word_embeddings"]:
        tensors["lm_head.weight"] = normal(config["vocab_size"], hidden, std=0.3)
    return tensors


def make_tiny_model(
    out_dir: str | Path,
    preset: str = "tiny",
    arch: str = "llama",
    tie_word_embeddings: bool = False,
    rope_scaling: str | None = None,
    seed: int = 0,
    shards: int = 1,
) -> Path:
    """Write the model folder and return its path. Same arguments, same bytes (on the same Python version)."""
    from safetensors.torch import save_file
    from transformers import PreTrainedTokenizerFast

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = PRESETS[preset]
    config = model_config(spec, arch, tie_word_embeddings, rope_scaling)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 0, "eos_token_id": [1, 4], "do_sample": False})
    )
    tensors = {k: v.contiguous() for k, v in random_weights(config, seed).items()}
    _save_weights(out, tensors, shards, save_file)

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_copy(train_tokenizer(spec.vocab_size)),
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|end_of_text|>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.model_max_length = spec.max_position_embeddings
    tokenizer.save_pretrained(out)
    return out


def _save_weights(out: Path, tensors: dict, shards: int, save_file) -> None:
    if shards <= 1:
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        return
    names = sorted(tensors)
    weight_map, total_bytes = {}, 0
    for i in range(shards):
        shard_name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i::shards]}
        save_file(part, str(out / shard_name), metadata={"format": "pt"})
        weight_map.update({n: shard_name for n in part})
        total_bytes += sum(t.numel() * t.element_size() for t in part.values())
    index = {"metadata": {"total_size": total_bytes}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--train" in argv:
        # A trained target + draft pair for speculative decoding (random weights make a draft model useless).
        from engine.train_pair import main as train_main

        argv.remove("--train")
        return train_main(argv)
    parser = argparse.ArgumentParser(
        prog="sluicegate make-tiny-model",
        description=__doc__,
        epilog="With --train: a trained target/ and draft/ pair (see --train --help).",
    )
    parser.add_argument("dir", help="output folder")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--arch", choices=sorted(ARCHITECTURES), default="llama")
    parser.add_argument("--tie-word-embeddings", action="store_true")
    parser.add_argument("--rope-scaling", choices=["llama3"], default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shards", type=int, default=1, help="write a sharded safetensors index with N files")
    args = parser.parse_args(argv)
    out = make_tiny_model(
        args.dir, args.preset, args.arch, args.tie_word_embeddings, args.rope_scaling, args.seed, args.shards
    )
    print(f"wrote {args.preset} {args.arch} model to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
