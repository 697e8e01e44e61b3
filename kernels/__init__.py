"""Attention and cache kernels: Triton versions for CUDA and pure-torch references with the same signatures.

Cache layout (one pair per layer):
    key_cache, value_cache: [num_blocks, block_size, num_kv_heads, head_dim]
A token at position p of a sequence lives in slot block_table[p // block_size] * block_size + p % block_size.

    reference.py            torch references of the attention ops (the contract: signatures and layout)
    reference_norm_rope.py  torch references of RMSNorm (+ residual add) and rotary
    batch_invariant.py      torch attention whose rows get the same bits whatever shares the step (CPU mode)
    triton_decode.py        paged decode attention, GQA/MQA, flash-decoding split of long contexts
    triton_prefill.py       causal attention of prefill chunks over cached prefix + chunk
    triton_cache.py         K/V writes into cache slots
    triton_norm_rope.py     fused RMSNorm (+ residual add) and rotary
    dispatch.py             get_attention_ops(device_type, backend): Triton or torch, same signatures
    paged_cases.py          random paged inputs for checking kernels (tests, bench/gpu)
Nothing here imports triton at import time except the triton_* modules, so `import kernels` works anywhere.
"""
