"""Embeddings from the served model (`/v1/embeddings`): an embedding request is a prompt prefilled like any other,
batched with the rest of the step, whose final-layer hidden states (after the final norm) are pooled into one vector
when its last prompt token is computed; it then samples one token, which nobody reads, and finishes.

LAST takes the last prompt token's state (what decoder-only embedding models such as e5-mistral or gte-Qwen are
trained for, and the only kind a prefix-cache hit leaves exact); MEAN averages every prompt position, summed chunk by
chunk, so its requests skip prefix-cache hits (a cached position has no hidden state in this step). The vector is
cut to `dimensions` (Matryoshka-style) and L2-normalized, as OpenAI's and vLLM's embeddings are.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from engine.models.llama import LlamaModel
    from engine.sequence import Sequence


class Pooling(enum.Enum):
    LAST = "last"
    MEAN = "mean"


@dataclass(frozen=True, slots=True)
class PoolingParams:
    pooling: Pooling
    dimensions: int | None = None  # keep the first `dimensions` values (before normalizing); None: all


@dataclass(frozen=True, slots=True)
class PoolSpan:
    """A pooled sequence's rows in this step's flattened hidden states: [start_row, end_row)."""

    seq: Sequence
    start_row: int
    end_row: int


def pool_step(model: LlamaModel, hidden: torch.Tensor, spans: list[PoolSpan]) -> None:
    """Fold this step's hidden states [T, H] into each pooled sequence; set `seq.embedding` when its prompt is done.

    Runs before the step's KV commit: `seq.num_computed_tokens` is still where this step's chunk starts."""
    for span in spans:
        seq = span.seq
        params = seq.pooling
        assert params is not None  # only pooled sequences have spans
        start = seq.num_computed_tokens
        done = start + span.end_row - span.start_row == seq.num_prompt_tokens
        if params.pooling is Pooling.MEAN:
            chunk_sum = model.final_norm(hidden[span.start_row : span.end_row]).float().sum(dim=0)
            # A chunk from position 0 starts the sum over (the first chunk, or a recompute after preemption)
            seq.pooled_sum = chunk_sum if start == 0 or seq.pooled_sum is None else seq.pooled_sum + chunk_sum
            if done:
                seq.embedding = _finish(seq.pooled_sum / seq.num_prompt_tokens, params.dimensions)
        elif done:
            last = model.final_norm(hidden[span.end_row - 1 : span.end_row]).float()[0]
            seq.embedding = _finish(last, params.dimensions)


def _finish(vector: torch.Tensor, dimensions: int | None) -> list[float]:
    if dimensions is not None:
        vector = vector[:dimensions]
    return torch.nn.functional.normalize(vector, dim=0).tolist()
