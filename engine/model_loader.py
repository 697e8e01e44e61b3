"""Loading a Llama-family model from a local Hugging Face folder: config through transformers, weights through
safetensors (one file or a sharded index), or random weights of the config's shapes (load_format='dummy')."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from engine.models.llama import LayerWeights, ModelWeights
from engine.models.spec import ModelSpec

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA device is available; use device='cpu'")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[dtype]


def load_hf_config(model_dir: str):
    from transformers import AutoConfig

    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir!r} has no config.json: pass a local Hugging Face model folder")
    return AutoConfig.from_pretrained(model_dir, local_files_only=True)


def _safetensors_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return [model_dir / name for name in sorted(set(weight_map.values()))]
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {model_dir}; use load_format='dummy' for random weights")
    return files


def read_safetensors(model_dir: str, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    tensors: dict[str, torch.Tensor] = {}
    for file in _safetensors_files(Path(model_dir)):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118  (a safetensors handle is no dict: keys() is its API)
                tensors[name] = f.get_tensor(name).to(device=device, dtype=dtype)
    return tensors


def dummy_tensors(spec: ModelSpec, device: torch.device, dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    """Random weights with HF names, made on the target device (fast even at 8B shapes on a GPU)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    q, kv = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    h, i = spec.hidden_size, spec.intermediate_size

    def normal(*shape: int, std: float = 0.02) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, device=device, dtype=torch.float32) * std).to(dtype)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, device=device, dtype=dtype)

    t = {"model.embed_tokens.weight": normal(spec.vocab_size, h), "model.norm.weight": ones(h)}
    for layer in range(spec.num_layers):
        p = f"model.layers.{layer}."
        t[p + "input_layernorm.weight"] = ones(h)
        t[p + "post_attention_layernorm.weight"] = ones(h)
        for name, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            t[p + f"self_attn.{name}.weight"] = normal(rows, h)
            if spec.qkv_bias:
                t[p + f"self_attn.{name}.bias"] = normal(rows)
        t[p + "self_attn.o_proj.weight"] = normal(h, q)
        t[p + "mlp.gate_proj.weight"] = normal(i, h)
        t[p + "mlp.up_proj.weight"] = normal(i, h)
        t[p + "mlp.down_proj.weight"] = normal(h, i)
    if not spec.tie_word_embeddings:
        t["lm_head.weight"] = normal(spec.vocab_size, h)
    return t


def fuse_weights(spec: ModelSpec, t: dict[str, torch.Tensor]) -> ModelWeights:
    """HF tensors -> fused layer weights. Pops as it goes so peak memory stays near one copy of the model."""
    missing = [n for n in ("model.embed_tokens.weight", "model.norm.weight") if n not in t]
    if missing:
        raise ValueError(f"checkpoint lacks {missing}; is this a Llama-family model?")
    layers = []
    for layer in range(spec.num_layers):
        p = f"model.layers.{layer}."
        qkv = torch.cat([t.pop(p + f"self_attn.{n}.weight") for n in ("q_proj", "k_proj", "v_proj")])
        bias = None
        if spec.qkv_bias:
            bias = torch.cat([t.pop(p + f"self_attn.{n}.bias") for n in ("q_proj", "k_proj", "v_proj")])
        layers.append(
            LayerWeights(
                input_norm=t.pop(p + "input_layernorm.weight"),
                qkv=qkv,
                qkv_bias=bias,
                o_proj=t.pop(p + "self_attn.o_proj.weight"),
                post_norm=t.pop(p + "post_attention_layernorm.weight"),
                gate_up=torch.cat([t.pop(p + "mlp.gate_proj.weight"), t.pop(p + "mlp.up_proj.weight")]),
                down=t.pop(p + "mlp.down_proj.weight"),
            )
        )
    embed = t.pop("model.embed_tokens.weight")
    lm_head = embed if spec.tie_word_embeddings else t.pop("lm_head.weight", embed)
    return ModelWeights(embed=embed, layers=layers, final_norm=t.pop("model.norm.weight"), lm_head=lm_head)


def load_weights(
    model_dir: str, spec: ModelSpec, load_format: str, device: torch.device, dtype: torch.dtype, seed: int
) -> ModelWeights:
    if load_format == "dummy":
        tensors = dummy_tensors(spec, device, dtype, seed)
    else:
        tensors = read_safetensors(model_dir, device, dtype)
    return fuse_weights(spec, tensors)
