"""Attention and cache kernels: Triton versions for CUDA and pure-torch references with the same signatures.

Cache layout (one pair per layer):
    key_cache, value_cache: [num_blocks, block_size, num_kv_heads, head_dim]
A token at position p of a sequence lives in slot block_table[p // block_size] * block_size + p % block_size.
"""
