"""Model definitions. One decoder covers the Llama family (Llama 2/3, Mistral, Qwen2): they differ only in
config values (GQA ratio, qkv bias, tied embeddings, rope scaling), which `ModelSpec` captures."""
