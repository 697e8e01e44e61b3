"""Engine configuration: one typed object, validated once at start-up, errors that name the value and the fix."""

from __future__ import annotations

from dataclasses import dataclass

_DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass
class EngineConfig:
    model: str
    """Path of a local Hugging Face model folder (config.json, *.safetensors, tokenizer files)."""
    dtype: str = "auto"
    """Compute and KV-cache dtype: auto (bf16 on CUDA, fp32 on CPU), float32, bfloat16 or float16."""
    load_format: str = "auto"
    """'auto' reads safetensors weights; 'dummy' fills random weights of the config's shapes (benchmarks)."""
    device: str = "auto"
    """'auto' (CUDA when available), 'cpu' or 'cuda'."""
    block_size: int = 16
    """Tokens per KV-cache block; the gateway learns it from the KV events snapshot."""
    kv_cache_memory_bytes: int | None = None
    """Bytes for the KV block pool. None: 512 MiB on CPU, 90% of free memory after weights on CUDA."""
    num_kv_blocks: int | None = None
    """Exact number of KV blocks (overrides kv_cache_memory_bytes); tests use it to force preemption."""
    max_num_seqs: int = 128
    """Most sequences in one step's batch."""
    max_num_batched_tokens: int = 2048
    """Token budget per step: decodes take one each, prefill chunks take the rest."""
    max_model_len: int | None = None
    """Longest prompt + output. None: the model's max_position_embeddings."""
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    """Split long prompts across steps so decodes never stall behind them."""
    long_prefill_token_threshold: int = 0
    """Largest prefill chunk of one sequence per step (0: the remaining token budget)."""
    preemption_mode: str = "recompute"
    """When blocks run out: 'recompute' (drop KV, prefill again later) or 'swap' (copy blocks to host memory)."""
    swap_space_bytes: int = 1 << 30
    """Host memory for swapped-out blocks (preemption_mode='swap')."""
    kv_admission_watermark: float = 0.01
    """Fraction of blocks kept free when admitting new sequences, so running ones can grow without preemption."""
    seed: int = 0
    """Seed for dummy weights and for requests without their own seed."""
    attention_backend: str = "auto"
    """'auto' (Triton on CUDA, torch elsewhere), 'torch' or 'triton'."""
    cpu_threads: int | None = None
    """torch intra-op threads on CPU. None: torch's default (one per core). Several replicas sharing a machine should
    split the cores between them: oversubscribed thread pools make small models many times slower."""
    enforce_eager: bool = False
    """Disable CUDA graphs for decode steps."""
    cuda_graph_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    """Decode batch sizes captured as CUDA graphs; a step is padded up to the next one (larger ones run eagerly)."""
    speculative_method: str | None = None
    """Speculative decoding: None (off), 'ngram' (prompt lookup) or 'draft' (a smaller model, speculative_model)."""
    speculative_model: str | None = None
    """Draft model folder (same tokenizer as the target) for speculative_method='draft'."""
    num_speculative_tokens: int = 4
    """k: draft tokens proposed per sequence per step."""
    speculative_adaptive: bool = True
    """Turn speculation off (per request and globally) while it does not pay, and back on when it does."""
    served_model_name: str | None = None
    """Name reported by /v1/models and expected in requests. None: the folder's name."""

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype={self.dtype!r} is not one of {_DTYPES}")
        if self.load_format not in ("auto", "dummy"):
            raise ValueError(f"load_format={self.load_format!r}: use 'auto' (safetensors) or 'dummy' (random)")
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size={self.block_size}: use a power of two (16 is the default)")
        if self.preemption_mode not in ("recompute", "swap"):
            raise ValueError(f"preemption_mode={self.preemption_mode!r}: use 'recompute' or 'swap'")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs={self.max_num_seqs}: must be at least 1")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens={self.max_num_batched_tokens} is below max_num_seqs={self.max_num_seqs}: "
                "every running sequence needs at least one token per step; raise max_num_batched_tokens"
            )
        if not 0.0 <= self.kv_admission_watermark < 1.0:
            raise ValueError(f"kv_admission_watermark={self.kv_admission_watermark}: must be in [0, 1)")
        if self.speculative_method not in (None, "ngram", "draft"):
            raise ValueError(f"speculative_method={self.speculative_method!r}: use None, 'ngram' or 'draft'")
        if self.speculative_method == "draft" and not self.speculative_model:
            raise ValueError("speculative_method='draft' needs speculative_model (a draft model folder)")
        if self.num_speculative_tokens < 1:
            raise ValueError(f"num_speculative_tokens={self.num_speculative_tokens}: must be at least 1")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ValueError(f"cpu_threads={self.cpu_threads}: must be at least 1 (or unset for torch's default)")
        if self.attention_backend not in ("auto", "torch", "triton"):
            raise ValueError(f"attention_backend={self.attention_backend!r}: use auto, torch or triton")
