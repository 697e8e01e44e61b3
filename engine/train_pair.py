"""`sluicegate make-tiny-model DIR --train`: a trained target and draft Llama pair for speculative decoding.

A random-weight draft model agrees with its target only by chance, so speculation with it measures nothing. This
trains a small target and a smaller draft, sharing one tokenizer, for a few minutes on CPU in fp32, on text every
machine has offline (the Python standard library's sources, as engine/tiny_model.py uses for its tokenizer):

    DIR/target/         Hugging Face folders that transformers.AutoModelForCausalLM and our engine load
    DIR/draft/          (config.json, model.safetensors, tokenizer, chat template, generation_config.json)
    DIR/train_info.json steps run, losses, and how often the two agree (the acceptance rates to expect)

Both models see the same batches in the same order. Deterministic: the same seed and step count give the same
weights on the same machine and thread count. With `minutes`, the step count comes from timing the first steps,
so it varies by machine; train_info.json records it, and `--steps N` replays exactly N.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.tiny_model import CHAT_TEMPLATE, Preset, model_config, train_tokenizer, training_corpus

TARGET_PRESET = Preset(
    vocab_size=4096, hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=768,
    max_position_embeddings=2048,
)  # fmt: skip
DRAFT_PRESET = Preset(
    vocab_size=4096, hidden_size=128, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=384,
    max_position_embeddings=2048,
)  # fmt: skip
END_OF_TEXT_ID = 1  # <|end_of_text|> in tiny_model's SPECIAL_TOKENS, placed between source files
_TIMING_STEPS = 3  # steps timed to turn `minutes` into a step count; they run inside the warmup


@dataclass(frozen=True)
class TrainConfig:
    minutes: float = 5.0
    """Wall-clock budget for both models together (ignored when `steps` is set)."""
    steps: int | None = None
    """Exact optimizer steps per model; set it to reproduce a run bit for bit."""
    seq_len: int = 256
    """Tokens per training window."""
    batch_size: int = 8
    """Windows per step."""
    learning_rate: float = 3e-3
    """Peak AdamW learning rate (after linear warmup, then cosine decay to 10% of it)."""
    warmup_steps: int = 10
    corpus_bytes: int = 4 << 20
    """Characters of standard-library source to train on (about 1.2M tokens at the default)."""
    seed: int = 0
    num_threads: int = max(1, min(4, (os.cpu_count() or 2) // 2))
    """torch CPU threads; half the cores by default, since the machine is usually shared."""
    eval_windows: int = 16
    """Held-out windows for the final loss and agreement numbers."""

    def __post_init__(self) -> None:
        if self.steps is None and self.minutes <= 0:
            raise ValueError(f"minutes={self.minutes}: must be > 0 (or set steps)")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps={self.steps}: must be at least 1")
        if self.warmup_steps < _TIMING_STEPS:
            raise ValueError(f"warmup_steps={self.warmup_steps}: must be at least {_TIMING_STEPS}")
        if self.seq_len < 2 or self.batch_size < 1 or self.eval_windows < 1 or self.num_threads < 1:
            raise ValueError("seq_len must be >= 2 and batch_size, eval_windows, num_threads >= 1")


def train_pair(out_dir: str | Path, minutes: float = 5.0, **overrides) -> dict:
    """Train and save the pair under out_dir; return what train_info.json holds. overrides: TrainConfig fields."""
    import torch

    config = TrainConfig(minutes=minutes, **overrides)
    torch.set_num_threads(config.num_threads)
    out = Path(out_dir)
    tokenizer = train_tokenizer(TARGET_PRESET.vocab_size)
    train_ids, eval_ids = _token_stream(tokenizer, config)
    target, draft = _new_model(TARGET_PRESET, config.seed), _new_model(DRAFT_PRESET, config.seed + 1)
    eval_before = _evaluate(target, draft, eval_ids, config)
    losses = _train(target, draft, train_ids, config)
    info = {
        "config": asdict(config),
        "steps": len(losses["target"]),
        "train_tokens": int(train_ids.numel()),
        "loss_first": {name: values[0] for name, values in losses.items()},
        "loss_last": {name: values[-1] for name, values in losses.items()},
        "eval_before": eval_before,
        "eval_after": _evaluate(target, draft, eval_ids, config),
    }
    for name, model in (("target", target), ("draft", draft)):
        _save(model, tokenizer, out / name)
    (out / "train_info.json").write_text(json.dumps(info, indent=2))
    return info


def _token_stream(tokenizer, config: TrainConfig):
    """The corpus as one token tensor, files separated by <|end_of_text|>; the last windows are held out."""
    import torch

    ids: list[int] = []
    for encoding in tokenizer.encode_batch(training_corpus(config.corpus_bytes)):
        ids.extend(encoding.ids)
        ids.append(END_OF_TEXT_ID)
    stream = torch.tensor(ids, dtype=torch.long)
    num_eval = config.eval_windows * config.seq_len
    if len(stream) < 4 * num_eval:
        raise ValueError(f"corpus has {len(stream)} tokens, too few for {config.eval_windows} eval windows")
    return stream[:-num_eval], stream[-num_eval:].view(config.eval_windows, config.seq_len)


def _new_model(preset: Preset, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hf_config = model_config(preset, "llama", tie_word_embeddings=True, rope_scaling=None)
    hf_config.pop("torch_dtype")
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**hf_config, dtype="float32")).float()


def _train(target, draft, train_ids, config: TrainConfig) -> dict[str, list[float]]:
    """Both models step on the same batches; returns each one's loss per step."""
    import torch

    gen = torch.Generator().manual_seed(config.seed)
    models = {"target": target, "draft": draft}
    optimizers = {name: _optimizer(model, config) for name, model in models.items()}
    losses: dict[str, list[float]] = {"target": [], "draft": []}
    total_steps, started_s, step = config.steps, time.perf_counter(), 0
    while total_steps is None or step < total_steps:
        starts = torch.randint(0, len(train_ids) - config.seq_len, (config.batch_size,), generator=gen)
        batch = torch.stack([train_ids[s : s + config.seq_len] for s in starts.tolist()])
        lr = _learning_rate(step, total_steps, config)
        for name, model in models.items():
            losses[name].append(_step(model, optimizers[name], batch, lr))
        step += 1
        if total_steps is None and step == _TIMING_STEPS:
            per_step_s = (time.perf_counter() - started_s) / _TIMING_STEPS
            total_steps = max(config.warmup_steps + 1, int(config.minutes * 60.0 / per_step_s))
    return losses


def _optimizer(model, config: TrainConfig):
    import torch

    return torch.optim.AdamW(model.parameters(), lr=config.learning_rate, betas=(0.9, 0.95), weight_decay=0.1)


def _learning_rate(step: int, total_steps: int | None, config: TrainConfig) -> float:
    if step < config.warmup_steps or total_steps is None:
        return config.learning_rate * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, total_steps - config.warmup_steps)
    return config.learning_rate * (0.1 + 0.45 * (1.0 + math.cos(math.pi * progress)))


def _step(model, optimizer, batch, lr: float) -> float:
    import torch

    for group in optimizer.param_groups:
        group["lr"] = lr
    model.train()
    loss = model(input_ids=batch, labels=batch).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return float(loss.detach())


def _evaluate(target, draft, eval_ids, config: TrainConfig) -> dict[str, float]:
    """Held-out loss and next-token accuracy of each model, how often their greedy next tokens agree (the
    acceptance rate of greedy speculation), and the mean of sum_x min(p(x), q(x)) (that of sampling at temperature
    1). At initialization agreement is already well above 1/V: with tied embeddings both models echo the input."""
    import torch

    with torch.no_grad():
        target.eval()
        draft.eval()
        target_out = target(input_ids=eval_ids, labels=eval_ids)
        draft_out = draft(input_ids=eval_ids, labels=eval_ids)
        p, q = target_out.logits.softmax(-1), draft_out.logits.softmax(-1)
        next_ids = eval_ids[:, 1:]
        return {
            "target_loss": float(target_out.loss),
            "draft_loss": float(draft_out.loss),
            "target_accuracy": float((p[:, :-1].argmax(-1) == next_ids).float().mean()),
            "draft_accuracy": float((q[:, :-1].argmax(-1) == next_ids).float().mean()),
            "greedy_agreement": float((p.argmax(-1) == q.argmax(-1)).float().mean()),
            "sampled_acceptance": float(torch.minimum(p, q).sum(-1).mean()),
            "chance_agreement": 1.0 / p.shape[-1],
        }


def _save(model, tokenizer_object, out: Path) -> None:
    """The model and the shared tokenizer, laid out like make_tiny_model's folders."""
    from transformers import PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 0, "eos_token_id": [1, 4], "do_sample": False})
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer_object,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|end_of_text|>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.model_max_length = TARGET_PRESET.max_position_embeddings
    tokenizer.save_pretrained(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sluicegate make-tiny-model DIR --train", description=__doc__)
    parser.add_argument("dir", help="output folder; target/ and draft/ are written inside it")
    parser.add_argument("--minutes", type=float, default=5.0, help="training time for both models together")
    parser.add_argument("--steps", type=int, default=None, help="exact step count (overrides --minutes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=TrainConfig.num_threads, help="torch CPU threads")
    args = parser.parse_args(argv)
    from transformers.utils import logging

    logging.disable_progress_bar()  # save_pretrained's shard bar; this command prints its own summary
    info = train_pair(args.dir, minutes=args.minutes, steps=args.steps, seed=args.seed, num_threads=args.threads)
    after = info["eval_after"]
    print(
        f"trained {info['steps']} steps: loss target {info['loss_first']['target']:.2f} -> "
        f"{after['target_loss']:.2f}, draft {info['loss_first']['draft']:.2f} -> {after['draft_loss']:.2f}; "
        f"greedy agreement {after['greedy_agreement']:.2f}, sampled acceptance {after['sampled_acceptance']:.2f}; "
        f"wrote {Path(args.dir) / 'target'} and {Path(args.dir) / 'draft'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
