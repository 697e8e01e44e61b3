"""A Llama-family decoder over a flattened token batch and a paged KV cache (no padding, no per-sequence loop).

Weights are fused at load time: q/k/v into one [Hq·D + 2·Hkv·D, hidden] matrix and gate/up into one
[2·intermediate, hidden] matrix, so each layer runs 4 matmuls instead of 7.

With the Triton kernels (CUDA), each residual add and the RMSNorm after it are one kernel, and so is RoPE: in torch
they are about 20 elementwise ops a layer, each a kernel launch in the eager (mixed prefill) steps that CUDA graphs do
not cover. The torch path keeps HF's exact op order, which the token-exact tests compare against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.attention import AttentionMetadata, PagedAttention
from engine.models.linear import linear_for
from engine.models.rope import RotaryEmbedding
from engine.models.spec import ModelSpec


@dataclass
class LayerWeights:
    input_norm: torch.Tensor  # [H]
    qkv: torch.Tensor  # [(Hq + 2·Hkv)·D, H]
    qkv_bias: torch.Tensor | None
    o_proj: torch.Tensor  # [H, Hq·D]
    post_norm: torch.Tensor  # [H]
    gate_up: torch.Tensor  # [2·I, H]
    down: torch.Tensor  # [H, I]


@dataclass
class ModelWeights:
    embed: torch.Tensor  # [V, H]
    layers: list[LayerWeights]
    final_norm: torch.Tensor  # [H]
    lm_head: torch.Tensor  # [V, H] (the embedding itself when tied)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Normalise in fp32 and scale in the model dtype, exactly as HF's LlamaRMSNorm does.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


class LlamaModel:
    def __init__(
        self,
        spec: ModelSpec,
        weights: ModelWeights,
        rope: RotaryEmbedding,
        attention: PagedAttention,
        batch_invariant: bool = False,
    ):
        self.spec = spec
        self.w = weights
        self.rope = rope
        self.attention = attention
        self.q_size = spec.num_heads * spec.head_dim
        self.kv_size = spec.num_kv_heads * spec.head_dim
        matrices = [m for layer in weights.layers for m in (layer.qkv, layer.o_proj, layer.gate_up, layer.down)]
        self.linear = linear_for(weights.embed.device, [*matrices, weights.lm_head], batch_invariant)
        self.ops = attention.ops
        self.fused_norm_rope = getattr(attention.ops, "backend", None) == "triton"  # (a bare reference module has none)

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,  # [T]
        positions: torch.Tensor,  # [T]
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],  # per layer ([N, B, Hkv, D], [N, B, Hkv, D])
        meta: AttentionMetadata,
    ) -> torch.Tensor:  # [T, H] final hidden states (before the final norm)
        spec = self.spec
        hidden = F.embedding(input_ids, self.w.embed)
        num_tokens = hidden.shape[0]
        pending: torch.Tensor | None = None  # the last sublayer's output, not yet added to the residual stream
        for layer, (key_cache, value_cache) in zip(self.w.layers, kv_caches):
            x, hidden = self._add_norm(pending, hidden, layer.input_norm)
            qkv = self.linear(x, layer.qkv, layer.qkv_bias)
            q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
            q = q.view(num_tokens, spec.num_heads, spec.head_dim)
            k = k.view(num_tokens, spec.num_kv_heads, spec.head_dim)
            v = v.view(num_tokens, spec.num_kv_heads, spec.head_dim)
            if self.fused_norm_rope:
                q, k = self.ops.apply_rotary(q, k, positions, self.rope.cos, self.rope.sin)
            else:
                q, k = self.rope.apply(q, k, positions)
            attn = self.attention(q, k, v, key_cache, value_cache, meta)
            pending = self.linear(attn.reshape(num_tokens, self.q_size), layer.o_proj, None)
            x, hidden = self._add_norm(pending, hidden, layer.post_norm)
            gate, up = self.linear(x, layer.gate_up, None).chunk(2, dim=-1)
            pending = self.linear(F.silu(gate) * up, layer.down, None)
        return hidden if pending is None else hidden + pending

    def _add_norm(
        self, pending: torch.Tensor | None, hidden: torch.Tensor, weight: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(RMSNorm of the residual stream, the stream) after adding `pending` to it."""
        eps = self.spec.rms_norm_eps
        if pending is None:
            return self._norm(hidden, weight), hidden
        if self.fused_norm_rope:
            return self.ops.add_rms_norm(pending, hidden, weight, eps)
        hidden = hidden + pending
        return rms_norm(hidden, weight, eps), hidden

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if self.fused_norm_rope:
            return self.ops.rms_norm(x, weight, self.spec.rms_norm_eps)
        return rms_norm(x, weight, self.spec.rms_norm_eps)

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [R, H] rows that need sampling -> logits [R, V] in fp32."""
        return self.linear(self.final_norm(hidden), self.w.lm_head, None).float()

    def final_norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [R, H] from forward -> the model's output states (what the LM head and embeddings read)."""
        return self._norm(hidden, self.w.final_norm)
