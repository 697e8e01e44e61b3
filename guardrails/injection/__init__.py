"""Prompt-injection detection: weighted rules over normalized and decoded text, plus an optional local classifier.

A learned hashed-n-gram model (model.py, numpy at inference; trained and validated leave-one-source-out by
`python -m guardrails.injection.train`) ships beside them; the gateway does not use it yet (docs/benchmarks.md).
"""
