"""`sluicegate capacity`: how much KV cache a model leaves on a GPU, and why paged blocks serve more requests.

    KV bytes per token = 2 (K and V) * num_layers * num_kv_heads * head_dim * bytes per element
    KV budget          = GPU memory - weights (parameter count * bytes) - activation reserve
    tokens that fit    = KV budget // KV bytes per token;  blocks = KV budget // (block_size * KV bytes per token)

The seed study draws output lengths from a Pareto distribution (heavy-tailed like real chat outputs; capped, with
its scale solved so the capped mean is exactly the requested mean) and counts the requests that fit at once:

    contiguous   every request reserves prompt + max_output_tokens up front (it cannot know its output length)
    paged        every request holds ceil((prompt + output) / block_size) blocks, so only its last block is slack

Torch-free: it reads config.json and safetensors headers (JSON), never weights.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import re
import struct
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

BYTES_PER_ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
_DTYPE_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float8": "fp8"}


class CapacityError(ValueError):
    """Input the planner cannot use (unknown model, bad size, a model that does not fit): a user error."""


@dataclass(frozen=True)
class ModelShape:
    """The few numbers of a decoder-only transformer that decide its memory."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    num_experts: int = 1
    """Mixture-of-experts models hold this many MLPs per layer (all resident in memory)."""
    num_params: int | None = None
    """Exact count when known (safetensors headers); None: derived from the shape."""

    @property
    def param_count(self) -> int:
        return self.num_params if self.num_params is not None else derived_param_count(self)


def _shape(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    inter: int,
    vocab: int,
    max_pos: int,
    qkv_bias: bool = False,
) -> ModelShape:
    return ModelShape(name, layers, hidden, heads, kv_heads, hidden // heads, inter, vocab, max_pos, qkv_bias=qkv_bias)


# Published config.json values of each model.
BUILTIN_MODELS: dict[str, ModelShape] = {
    s.name: s
    for s in (
        _shape("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
        _shape("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
        _shape("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
        _shape("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
        _shape("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072),
        _shape("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, 131072),
        _shape("mistral-7b", 32, 4096, 32, 8, 14336, 32768, 32768),
        _shape("qwen2-7b", 28, 3584, 28, 4, 18944, 152064, 32768, qkv_bias=True),
        _shape("qwen2-72b", 80, 8192, 64, 8, 29568, 152064, 32768, qkv_bias=True),
    )
}


def derived_param_count(shape: ModelShape) -> int:
    """Parameters of a Llama-family decoder: embeddings, attention, gated MLP (x experts), RMSNorm weights."""
    h, d = shape.hidden_size, shape.head_dim
    q_width, kv_width = shape.num_heads * d, shape.num_kv_heads * d
    attention = h * q_width + 2 * h * kv_width + q_width * h
    if shape.qkv_bias:
        attention += q_width + 2 * kv_width
    mlp = 3 * h * shape.intermediate_size * shape.num_experts
    router = h * shape.num_experts if shape.num_experts > 1 else 0
    per_layer = attention + mlp + router + 2 * h
    embeddings = shape.vocab_size * h * (1 if shape.tie_word_embeddings else 2)
    return shape.num_layers * per_layer + embeddings + h


def shape_from_config(config: dict[str, Any], name: str) -> ModelShape:
    """A ModelShape from a Hugging Face config.json dict (Llama, Mistral, Qwen2, Mixtral field names)."""
    try:
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return ModelShape(
            name=name,
            num_layers=int(config["num_hidden_layers"]),
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate_size=int(config["intermediate_size"]),
            vocab_size=int(config["vocab_size"]),
            max_position_embeddings=int(config.get("max_position_embeddings") or 4096),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            qkv_bias=bool(config.get("attention_bias")) or config.get("model_type") == "qwen2",
            num_experts=int(config.get("num_local_experts") or 1),
        )
    except KeyError as exc:
        raise CapacityError(f"config of {name!r} has no {exc.args[0]!r}: is it a decoder-only transformer?") from exc


def safetensors_param_count(folder: Path) -> int | None:
    """Exact parameter count from the safetensors headers (8-byte length, then JSON), or None without weights."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with path.open("rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(header_len))
        total += sum(math.prod(t["shape"]) for key, t in header.items() if key != "__metadata__")
    return total


def load_model_shape(model: str) -> ModelShape:
    """`model` is a built-in name, a config.json path, or a model folder holding config.json."""
    if model.lower() in BUILTIN_MODELS:
        return BUILTIN_MODELS[model.lower()]
    path = Path(model)
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.is_file():
        names = ", ".join(BUILTIN_MODELS)
        raise CapacityError(f"model {model!r} is neither a config.json, a model folder, nor a built-in ({names})")
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError) as exc:
        raise CapacityError(f"cannot read {config_path}: {exc}") from exc
    shape = shape_from_config(config, name=config_path.parent.name or str(config_path))
    return replace(shape, num_params=safetensors_param_count(config_path.parent))


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "ki": 2**10,
    "kib": 2**10,
    "mi": 2**20,
    "mib": 2**20,
    "gi": 2**30,
    "gib": 2**30,
    "ti": 2**40,
    "tib": 2**40,
}


def parse_bytes(text: str) -> int:
    """'80GiB' -> 85899345920. Decimal units (GB, G) and binary ones (GiB, Gi), as Kubernetes reads them."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise CapacityError(f"size {text!r} not understood: write e.g. 80GiB, 141GB or 2.5GiB")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def parse_reserve(text: str, gpu_memory_bytes: int) -> int:
    """The activation reserve: a size ('4GiB') or a share of the GPU ('10%')."""
    if text.strip().endswith("%"):
        share = float(text.strip()[:-1]) / 100
        if not 0 <= share < 1:
            raise CapacityError(f"activation reserve {text!r}: use a share in [0%, 100%) or a size like 4GiB")
        return int(gpu_memory_bytes * share)
    return parse_bytes(text)


def normalize_dtype(dtype: str) -> str:
    name = _DTYPE_ALIASES.get(dtype.lower(), dtype.lower())
    if name not in BYTES_PER_ELEMENT:
        raise CapacityError(f"dtype {dtype!r}: use one of {', '.join(BYTES_PER_ELEMENT)}")
    return name


def kv_bytes_per_token(
    shape: ModelShape, kv_dtype: str, tensor_parallel: int = 1, num_kv_heads: int | None = None
) -> int:
    """Per GPU: 2 * L * H_kv * d * bytes. Tensor parallelism splits KV heads, replicating them past H_kv GPUs."""
    heads = num_kv_heads if num_kv_heads is not None else shape.num_kv_heads
    heads_per_gpu = math.ceil(heads / tensor_parallel)
    return 2 * shape.num_layers * heads_per_gpu * shape.head_dim * BYTES_PER_ELEMENT[kv_dtype]


@dataclass(frozen=True)
class CapacityPlan:
    """Per GPU of a tensor-parallel group (every GPU holds the same tokens, a slice of each token's KV)."""

    gpu_memory_bytes: int
    weight_bytes: int
    activation_reserve_bytes: int
    kv_budget_bytes: int
    kv_bytes_per_token: int
    block_size: int
    num_tokens: int
    num_blocks: int


def plan_capacity(
    shape: ModelShape,
    gpu_memory_bytes: int,
    dtype: str,
    kv_dtype: str,
    activation_reserve_bytes: int,
    block_size: int = 16,
    tensor_parallel: int = 1,
    num_kv_heads: int | None = None,
) -> CapacityPlan:
    """A plan whose num_tokens is 0 when the weights and the reserve leave no room (see `shortfall_message`)."""
    weight_bytes = shape.param_count * BYTES_PER_ELEMENT[dtype] // tensor_parallel
    kv_budget = max(0, gpu_memory_bytes - weight_bytes - activation_reserve_bytes)
    per_token = kv_bytes_per_token(shape, kv_dtype, tensor_parallel, num_kv_heads)
    return CapacityPlan(
        gpu_memory_bytes=gpu_memory_bytes,
        weight_bytes=weight_bytes,
        activation_reserve_bytes=activation_reserve_bytes,
        kv_budget_bytes=kv_budget,
        kv_bytes_per_token=per_token,
        block_size=block_size,
        num_tokens=kv_budget // per_token,
        num_blocks=kv_budget // (per_token * block_size),
    )


def shortfall_message(shape: ModelShape, plan: CapacityPlan, tensor_parallel: int) -> str:
    return (
        f"{shape.name} does not fit: weights need {format_bytes(plan.weight_bytes)} and the activation reserve "
        f"{format_bytes(plan.activation_reserve_bytes)} of a {format_bytes(plan.gpu_memory_bytes)} GPU, leaving no "
        f"room for one {plan.block_size}-token block; use a larger --gpu-memory, a smaller --dtype or more "
        f"--tensor-parallel GPUs (now {tensor_parallel})"
    )


def pareto_scale_for_capped_mean(shape_alpha: float, mean: float, cap: float) -> float:
    """x_m such that E[min(X, cap)] = mean for X ~ Pareto(alpha, x_m); the cap otherwise lowers the mean."""

    def capped_mean(x_m: float) -> float:
        if x_m >= cap:
            return cap
        if shape_alpha == 1.0:
            return x_m * (1 + math.log(cap / x_m))
        mean_below_cap: float = (shape_alpha * x_m - x_m**shape_alpha * cap ** (1 - shape_alpha)) / (shape_alpha - 1)
        return mean_below_cap

    if not 0 < mean < cap:
        raise CapacityError(f"mean output length {mean} must be above 0 and below the cap {cap}")
    low, high = 0.0, cap  # capped_mean rises monotonically in x_m
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if capped_mean(mid) < mean else (low, mid)
    return (low + high) / 2


def output_lengths(mean: float, cap: int, shape_alpha: float, seed: int) -> Iterator[int]:
    """An endless seeded stream of output lengths: Pareto(shape_alpha), capped at `cap`, with mean `mean`."""
    scale = pareto_scale_for_capped_mean(shape_alpha, mean, cap)
    rng = random.Random(seed)
    while True:
        yield max(1, min(cap, round(scale * rng.paretovariate(shape_alpha))))


@dataclass(frozen=True)
class StudyRow:
    scheme: str
    num_requests: int
    reserved_tokens: int
    used_tokens: int

    @property
    def kv_utilization(self) -> float:
        return self.used_tokens / self.reserved_tokens if self.reserved_tokens else 0.0


def concurrency_study(
    num_tokens: int,
    block_size: int,
    prompt_tokens: int,
    max_output_tokens: int,
    mean_output_tokens: float,
    shape_alpha: float,
    seed: int,
) -> list[StudyRow]:
    """Requests in flight at once, each at its final length (the worst moment of its life)."""
    per_contiguous = prompt_tokens + max_output_tokens
    num_contiguous = num_tokens // per_contiguous
    # The same requests, in the same order, for both schemes: the first num_contiguous draws are the contiguous ones.
    draws = output_lengths(mean_output_tokens, max_output_tokens, shape_alpha, seed)
    contiguous_outputs = list(itertools.islice(draws, num_contiguous))
    used_contiguous = sum(prompt_tokens + n for n in contiguous_outputs)

    num_blocks = num_tokens // block_size
    blocks_taken = paged_used = num_paged = 0
    for output_tokens in itertools.chain(contiguous_outputs, draws):
        length = prompt_tokens + output_tokens
        blocks = -(-length // block_size)
        if blocks_taken + blocks > num_blocks:
            break
        blocks_taken += blocks
        paged_used += length
        num_paged += 1
    return [
        StudyRow("contiguous", num_contiguous, num_contiguous * per_contiguous, used_contiguous),
        StudyRow(f"paged ({block_size}-token blocks)", num_paged, blocks_taken * block_size, paged_used),
    ]


def attention_variants(shape: ModelShape) -> list[tuple[str, int]]:
    """MHA (one KV head per query head), the model's own grouping, and MQA (one KV head)."""
    variants = {shape.num_heads: "MHA", 1: "MQA"}
    if 1 < shape.num_kv_heads < shape.num_heads:
        variants[shape.num_kv_heads] = "GQA"
    return [
        (f"{label} ({heads} KV heads){' *' if heads == shape.num_kv_heads else ''}", heads)
        for heads, label in sorted(variants.items(), reverse=True)
    ]


def format_bytes(num_bytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(num_bytes) < 1024:
            return f"{num_bytes:.4g} {unit}"
        num_bytes /= 1024
    return f"{num_bytes:.4g} TiB"


def build_report(args: argparse.Namespace) -> dict[str, Any]:
    shape = load_model_shape(args.model)
    dtype = normalize_dtype(args.dtype)
    kv_dtype = normalize_dtype(args.kv_dtype) if args.kv_dtype else dtype
    gpu_memory = parse_bytes(args.gpu_memory)
    reserve = parse_reserve(args.activation_reserve, gpu_memory)
    if args.tensor_parallel < 1 or args.block_size < 1 or args.prompt_tokens < 0 or args.max_output_tokens < 2:
        raise CapacityError(
            "--tensor-parallel and --block-size must be >= 1, --prompt-tokens >= 0, --max-output-tokens >= 2"
        )
    plan = plan_capacity(shape, gpu_memory, dtype, kv_dtype, reserve, args.block_size, args.tensor_parallel)
    report = {
        "model": asdict(shape) | {"param_count": shape.param_count},
        "dtype": dtype,
        "kv_dtype": kv_dtype,
        "tensor_parallel": args.tensor_parallel,
        "plan": asdict(plan),
    }
    if plan.num_blocks == 0:
        return report | {"error": shortfall_message(shape, plan, args.tensor_parallel)}
    study_args = (
        args.block_size,
        args.prompt_tokens,
        args.max_output_tokens,
        args.mean_output_tokens,
        args.pareto_shape,
        args.seed,
    )
    study = concurrency_study(plan.num_tokens, *study_args)
    attention = []
    for label, heads in attention_variants(shape):
        variant = plan_capacity(
            shape, gpu_memory, dtype, kv_dtype, reserve, args.block_size, args.tensor_parallel, num_kv_heads=heads
        )
        paged = concurrency_study(variant.num_tokens, *study_args)[1]
        attention.append(
            {
                "attention": label,
                "num_kv_heads": heads,
                "kv_bytes_per_token": variant.kv_bytes_per_token,
                "num_tokens": variant.num_tokens,
                "paged_requests": paged.num_requests,
            }
        )
    return report | {
        "study": {
            "prompt_tokens": args.prompt_tokens,
            "output_tokens": {
                "distribution": "pareto",
                "shape": args.pareto_shape,
                "mean": args.mean_output_tokens,
                "max": args.max_output_tokens,
                "seed": args.seed,
            },
            "rows": [asdict(row) | {"kv_utilization": round(row.kv_utilization, 4)} for row in study],
            "paged_over_contiguous": round(study[1].num_requests / study[0].num_requests, 2)
            if study[0].num_requests
            else None,
        },
        "attention": attention,
    }


def render_report(report: dict[str, Any]) -> str:
    lines = _render_plan(report)
    if "error" in report:
        return "\n".join(lines + ["", report["error"]])
    return "\n".join(lines + [""] + _render_study(report))


def _render_plan(report: dict[str, Any]) -> list[str]:
    model, plan = report["model"], report["plan"]
    tp = f", tensor parallel {report['tensor_parallel']} (per GPU)" if report["tensor_parallel"] > 1 else ""
    lines = [
        f"{model['name']}: {model['param_count'] / 1e9:.2f}B params, {model['num_layers']} layers, "
        f"{model['num_heads']} heads / {model['num_kv_heads']} KV heads x {model['head_dim']}, "
        f"weights {report['dtype']}, KV {report['kv_dtype']}{tp}",
        "",
        f"  GPU memory            {format_bytes(plan['gpu_memory_bytes'])}",
        f"  weights               {format_bytes(plan['weight_bytes'])}",
        f"  activation reserve    {format_bytes(plan['activation_reserve_bytes'])}",
        f"  KV cache budget       {format_bytes(plan['kv_budget_bytes'])}",
        f"  KV bytes per token    {plan['kv_bytes_per_token']:,} ({format_bytes(plan['kv_bytes_per_token'])})",
        f"  tokens that fit       {plan['num_tokens']:,}",
        f"  {plan['block_size']}-token blocks       {plan['num_blocks']:,}",
    ]
    return lines


def _render_study(report: dict[str, Any]) -> list[str]:
    study = report["study"]
    lines = [
        f"Concurrent requests: prompt {study['prompt_tokens']} tokens, output ~ Pareto(shape "
        f"{study['output_tokens']['shape']}) mean {study['output_tokens']['mean']:g}, max "
        f"{study['output_tokens']['max']}, seed {study['output_tokens']['seed']}",
        f"  {'scheme':<26} {'requests':>10} {'KV used':>9}",
    ]
    lines += [f"  {r['scheme']:<26} {r['num_requests']:>10,} {r['kv_utilization']:>9.1%}" for r in study["rows"]]
    ratio = study["paged_over_contiguous"]
    lines += [f"  paged / contiguous: {ratio:.1f}x" if ratio else "  paged / contiguous: n/a (no contiguous slot)", ""]
    lines += [
        "Attention variants (same model, same budget; * = as configured)",
        f"  {'attention':<22} {'KV/token':>12} {'tokens':>12} {'paged requests':>15}",
    ]
    lines += [
        f"  {a['attention']:<22} {format_bytes(a['kv_bytes_per_token']):>12} {a['num_tokens']:>12,} "
        f"{a['paged_requests']:>15,}"
        for a in report["attention"]
    ]
    return lines


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="sluicegate capacity", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", required=True, help=f"config.json, model folder, or a built-in: {', '.join(BUILTIN_MODELS)}"
    )
    parser.add_argument("--gpu-memory", required=True, help="memory of one GPU, e.g. 80GiB, 141GB")
    parser.add_argument("--dtype", default="bf16", help="weight dtype: bf16 (default), fp16, fp32, fp8")
    parser.add_argument("--kv-dtype", default=None, help="KV-cache dtype (default: --dtype)")
    parser.add_argument(
        "--activation-reserve",
        default="10%",
        help="memory kept for activations and the runtime: a size or a share of the GPU (10%%)",
    )
    parser.add_argument("--tensor-parallel", type=int, default=1, help="GPUs sharing the model (default 1)")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per KV block (default 16)")
    parser.add_argument("--prompt-tokens", type=int, default=200, help="prompt length in the study (default 200)")
    parser.add_argument("--max-output-tokens", type=int, default=4096, help="output cap and contiguous reservation")
    parser.add_argument("--mean-output-tokens", type=float, default=150.0, help="mean output length (default 150)")
    parser.add_argument("--pareto-shape", type=float, default=1.5, help="Pareto tail index, > 1 (default 1.5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.pareto_shape <= 1:
            raise CapacityError(f"--pareto-shape {args.pareto_shape}: must be above 1 for a finite mean")
        report = build_report(args)
    except CapacityError as exc:
        print(
            json.dumps({"error": str(exc)}) if args.json else f"sluicegate capacity: {exc}",
            file=sys.stdout if args.json else sys.stderr,
        )
        return 2
    print(json.dumps(report) if args.json else render_report(report))
    return 1 if "error" in report else 0


if __name__ == "__main__":
    sys.exit(main())
