"""Engine configuration: one typed object, validated once at start-up, errors that name the value and the fix."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from sluicegate.schema import Path, Schema, Tuple


class EngineConfig(Schema):
    model: Path
    """Path of a local Hugging Face model folder (config.json, *.safetensors, tokenizer files)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Compute and KV-cache dtype: auto (bf16 on CUDA, fp32 on CPU), float32, bfloat16 or float16."""
    load_format: Literal["auto", "dummy"] = "auto"
    """'auto' reads safetensors weights; 'dummy' fills random weights of the config's shapes (benchmarks)."""
    device: str = "auto"
    """'auto' (CUDA when available), 'cpu' or 'cuda'."""
    block_size: Annotated[int, Field(ge=1)] = 16
    """Tokens per KV-cache block, a power of two; the gateway learns it from the KV events snapshot."""
    kv_cache_memory_bytes: Annotated[int, Field(ge=1)] | None = None
    """Bytes for the KV block pool. None: 512 MiB on CPU, 90% of free memory after weights on CUDA."""
    num_kv_blocks: Annotated[int, Field(ge=1)] | None = None
    """Exact number of KV blocks (overrides kv_cache_memory_bytes); tests use it to force preemption."""
    max_num_seqs: Annotated[int, Field(ge=1)] = 128
    """Most sequences in one step's batch."""
    max_num_batched_tokens: Annotated[int, Field(ge=1)] = 2048
    """Token budget per step: decodes take one each, prefill chunks take the rest."""
    max_model_len: Annotated[int, Field(ge=1)] | None = None
    """Longest prompt + output. None: the model's max_position_embeddings."""
    enable_prefix_caching: bool = True
    """Reuse the KV blocks of a prompt prefix already computed (by hash), instead of prefilling it again."""
    prefix_eviction: Literal["gdsf", "lru"] = "gdsf"
    """Which cached blocks go first when memory is needed: 'gdsf' (blocks many requests used outlive one-off
    prompts, and age as others are evicted; engine/prefix_eviction.py) or 'lru' (least recently freed)."""
    enable_chunked_prefill: bool = True
    """Split long prompts across steps so decodes never stall behind them."""
    long_prefill_token_threshold: Annotated[int, Field(ge=0)] = 0
    """Largest prefill chunk of one sequence per step (0: the remaining token budget)."""
    preemption_mode: Literal["recompute", "swap"] = "recompute"
    """When blocks run out: 'recompute' (drop KV, prefill again later) or 'swap' (copy blocks to host memory)."""
    swap_space_bytes: Annotated[int, Field(ge=0)] = 1 << 30
    """Host memory for swapped-out blocks (preemption_mode='swap')."""
    kv_admission_watermark: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.01
    """Fraction of blocks kept free when admitting new sequences, so running ones can grow without preemption."""
    seed: int = 0
    """Seed for dummy weights and for requests without their own seed."""
    attention_backend: Literal["auto", "torch", "triton"] = "auto"
    """'auto' (Triton on CUDA, torch elsewhere), 'torch' or 'triton'."""
    batch_invariant: bool = False
    """CPU only: every sequence's logits bit-identical whatever else shares its steps, however its prompt is chunked
    and at any thread count (matmuls in fixed row tiles, kernels/batch_invariant.py attention), so greedy and seeded
    outputs do not depend on load. Slower (docs/benchmarks.md); vLLM's VLLM_BATCH_INVARIANT is the GPU counterpart."""
    cpu_threads: Annotated[int, Field(ge=1)] | None = None
    """torch intra-op threads on CPU. None: torch's default (one per core). Several replicas sharing a machine should
    split the cores between them: oversubscribed thread pools make small models many times slower."""
    cpu_threads_adaptive: bool = True
    """Without cpu_threads: use fewer threads while other processes keep cores busy (engine/cpu_threads.py); the
    step's many short multi-threaded ops stall whenever one of their threads waits for a core."""
    async_output_processing: bool | None = None
    """Detokenize a step's tokens, check their stop strings and build their outputs while the next step runs on the
    device (a stop string then ends its sequence a step late; the extra token is dropped, but its row has drawn from
    the engine's shared random generator, so unseeded sampled outputs differ from the plain step's). None: on with
    CUDA; off on a CPU, where the forward runs on the same cores and outputs would only come a step later. Never with
    speculative decoding."""
    enforce_eager: bool = False
    """Disable CUDA graphs for decode steps."""
    cuda_graph_sizes: Annotated[tuple[Annotated[int, Field(ge=1)], ...], Tuple] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    """Decode batch sizes captured as CUDA graphs; a step is padded up to the next one (larger ones run eagerly)."""
    speculative_method: Literal["ngram", "draft"] | None = None
    """Speculative decoding: None (off), 'ngram' (prompt lookup) or 'draft' (a smaller model, speculative_model)."""
    speculative_model: Path | None = None
    """Draft model folder (same tokenizer as the target) for speculative_method='draft'."""
    num_speculative_tokens: Annotated[int, Field(ge=1)] = 4
    """k: draft tokens proposed per sequence per step."""
    speculative_adaptive: bool = True
    """Turn speculation off (per request and globally) while it does not pay, and back on when it does."""
    kv_role: Literal["both", "prefill", "decode"] = "both"
    """Disaggregated serving (docs/architecture.md): 'prefill' hands its prompts' KV blocks to decode replicas,
    'decode' reads them from prefill replicas over NIXL; both kinds still serve whole requests. 'both': no transfers."""
    kv_transfer_timeout_s: Annotated[float, Field(gt=0)] = 60.0
    """Prefill side: how long a finished prefill's blocks wait for a decode replica to read them before they are
    freed anyway."""
    served_model_name: str | None = None
    """Name reported by /v1/models and expected in requests. None: the folder's name."""

    @field_validator("block_size")
    @classmethod
    def _power_of_two(cls, block_size: int) -> int:
        if block_size & (block_size - 1):
            raise ValueError("use a power of two (16 is the default)")
        return block_size

    @model_validator(mode="after")
    def _consistent(self) -> EngineConfig:
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens={self.max_num_batched_tokens} is below max_num_seqs={self.max_num_seqs}: "
                "every running sequence needs at least one token per step; raise max_num_batched_tokens"
            )
        if self.kv_role == "decode" and not self.enable_prefix_caching:
            raise ValueError("kv_role='decode' needs enable_prefix_caching: read blocks join the prefix cache")
        if self.batch_invariant and (self.attention_backend == "triton" or self.device == "cuda"):
            raise ValueError("batch_invariant runs on CPU with the torch kernels: use device='cpu'")
        if self.speculative_method == "draft" and not self.speculative_model:
            raise ValueError("speculative_method='draft' needs speculative_model (a draft model folder)")
        return self
