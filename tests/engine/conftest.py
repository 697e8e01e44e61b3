"""Engine test fixtures: tiny models of every supported architecture and their transformers reference outputs,
built once per test run."""

from __future__ import annotations

import random

import pytest
import torch

from engine.tiny_model import make_tiny_model

ARCH_VARIANTS = {
    # name: (arch, tie_word_embeddings, rope_scaling)
    "llama": ("llama", False, None),
    "llama3-rope-tied": ("llama", True, "llama3"),
    "mistral": ("mistral", False, None),
    "qwen2-bias": ("qwen2", False, None),
}
NUM_REFERENCE_TOKENS = 24


@pytest.fixture(scope="session")
def arch_model_dirs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("arch-models")
    return {
        name: str(make_tiny_model(root / name, "tiny", arch, tied, rope, seed=i, shards=2 if i == 1 else 1))
        for i, (name, (arch, tied, rope)) in enumerate(ARCH_VARIANTS.items())
    }


def mixed_prompts(vocab_size: int, count: int = 16, seed: int = 0) -> list[list[int]]:
    """Prompts of 1..150 tokens; some share long prefixes (prefix-cache hits), some are exact block multiples."""
    rng = random.Random(seed)
    shared = [rng.randrange(5, vocab_size) for _ in range(70)]
    lengths = [1, 2, 15, 16, 17, 31, 32, 33, 48, 64, 90, 150]
    prompts = [[rng.randrange(5, vocab_size) for _ in range(n)] for n in lengths]
    prompts += [shared[:n] + [rng.randrange(5, vocab_size) for _ in range(k)] for n, k in ((70, 3), (64, 10), (48, 0))]
    prompts.append(list(shared))
    return prompts[:count] if count <= len(prompts) else prompts


def hf_greedy(model_dir: str, prompts: list[list[int]], num_tokens: int) -> list[list[int]]:
    """transformers' own greedy generate, one prompt at a time (no padding), fp32, EOS ignored."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.generation_config.eos_token_id = None
    outs = []
    with torch.inference_mode():
        for p in prompts:
            ids = torch.tensor([p])
            gen = model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=num_tokens, do_sample=False, pad_token_id=0
            )
            outs.append(gen[0, len(p) :].tolist())
    return outs


@pytest.fixture(scope="session")
def hf_references(arch_model_dirs) -> dict[str, tuple[list[list[int]], list[list[int]]]]:
    refs = {}
    for name, model_dir in arch_model_dirs.items():
        prompts = mixed_prompts(512)
        refs[name] = (prompts, hf_greedy(model_dir, prompts, NUM_REFERENCE_TOKENS))
    return refs
