"""The gateway: a drop-in OpenAI endpoint with tenants, token buckets, prefix-affinity routing and guardrails.

Torch-free by contract (docs/architecture.md): nothing under gateway/ may import torch, directly or through engine/
or kernels/.
"""
