"""Counters and events the engine exposes to its server: a snapshot of engine state, and KV-cache events."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class KVEvent:
    kind: str  # "stored" | "removed" | "cleared"
    block_hashes: list[int] = field(default_factory=list)


@dataclass
class EngineStats:
    num_running: int = 0
    num_waiting: int = 0
    num_swapped: int = 0
    kv_cache_usage: float = 0.0  # fraction of blocks held by live sequences (cached-but-free blocks count as free)
    num_blocks_total: int = 0
    num_blocks_free: int = 0
    prefix_cache_queries_total: int = 0  # prompt tokens looked up
    prefix_cache_hits_total: int = 0  # of those, tokens found cached
    num_preemptions_total: int = 0
    num_swapped_out_total: int = 0
    num_swapped_in_total: int = 0
    num_chunked_prefill_steps_total: int = 0  # steps that ran a prefill chunk shorter than the remaining prompt
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    num_steps_total: int = 0
    kv_handoffs_read_total: int = 0  # prefill side: held blocks a decode replica read (engine/kv_transfer/)
    kv_handoffs_expired_total: int = 0  # prefill side: held blocks freed unread at their deadline
    kv_handoffs_held: int = 0  # prefill side: handoffs waiting to be read now
    last_step_time_s: float = 0.0
    spec_decode: object | None = None  # a SpecDecodeStats snapshot when speculative decoding is on
