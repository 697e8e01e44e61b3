"""Prompt-injection detection (detector.py): a fine-tuned encoder (encoder/, int8 on ONNX Runtime) reads every prompt,
and weighted rules over normalized and decoded text count where they read what it cannot.

With the encoder off (`injection_encoder: false`), the rules and a hashed-n-gram model (model.py, numpy; trained and
validated leave-one-source-out by `python -m guardrails.injection.train`) decide (docs/benchmarks.md).
"""
