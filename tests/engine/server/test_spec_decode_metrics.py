"""A replica with speculative decoding reports vLLM's spec-decode counters on /metrics."""

from __future__ import annotations

import re

import httpx
import openai

from tests.engine.server.live import LiveServer, make_engine


def _counter(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} ([0-9.e+]+)$", text, re.M)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


def test_spec_decode_counters_follow_verification(tiny_model_dir):
    engine = make_engine(tiny_model_dir, speculative_method="draft", speculative_model=tiny_model_dir,
                         speculative_adaptive=False)  # fmt: skip
    server = LiveServer(engine).start()
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
        out = client.completions.create(
            model=engine.model_name, prompt="def f(x): return x", max_tokens=24, temperature=0.0,
            extra_body={"ignore_eos": True},
        )  # fmt: skip
        assert out.usage.completion_tokens == 24
        text = httpx.get(f"{server.url}/metrics").text
        drafts = _counter(text, "vllm:spec_decode_num_drafts_total")
        draft_tokens = _counter(text, "vllm:spec_decode_num_draft_tokens_total")
        accepted = _counter(text, "vllm:spec_decode_num_accepted_tokens_total")
        assert drafts > 0 and 0 < accepted <= draft_tokens
    finally:
        server.stop()
