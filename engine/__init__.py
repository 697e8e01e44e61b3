"""One engine replica: paged KV cache, prefix caching, continuous batching, and the model runner.

Public API: `LLM` (offline), `LLMEngine` (step loop, used by the server), `SamplingParams`, `EngineConfig`.
"""

from engine.config import EngineConfig
from engine.outputs import CompletionOutput, RequestOutput
from engine.sampling_params import SamplingParams

__all__ = ["LLM", "LLMEngine", "EngineConfig", "SamplingParams", "RequestOutput", "CompletionOutput"]


def __getattr__(name: str):
    # LLM and LLMEngine import torch and the model code; load them only when asked for.
    if name == "LLM":
        from engine.llm import LLM

        return LLM
    if name == "LLMEngine":
        from engine.llm_engine import LLMEngine

        return LLMEngine
    raise AttributeError(name)
