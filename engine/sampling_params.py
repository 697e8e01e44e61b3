"""Per-request sampling parameters, validated once when the request arrives."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.errors import RequestError
from engine.pooling import PoolingParams
from engine.structured.spec import GrammarSpec

MAX_LOGPROBS = 20
MAX_TEMPERATURE = 1e4
MAX_LOGIT_BIAS = 100.0


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: off
    min_p: float = 0.0
    seed: int | None = None
    max_tokens: int | None = 16  # None: up to the context length
    min_tokens: int = 0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None  # number of top logprobs per token besides the chosen one; None: no logprobs
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)  # token id -> added to its logit (OpenAI's semantics)
    skip_special_tokens: bool = True
    structured: GrammarSpec | None = None  # the grammar the output must follow (response_format, guided_*)
    pooling: PoolingParams | None = None  # an embedding request: pool the prompt's states (engine/pooling.py)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = [s for s in self.stop if s]
        if self.top_k == -1:
            self.top_k = 0
        self._check(self.n >= 1, "n must be at least 1", "n")
        # Above float32's range a temperature turns into inf and the logits into NaN.
        self._check(
            0.0 <= self.temperature <= MAX_TEMPERATURE,
            f"temperature must be in [0, {MAX_TEMPERATURE:g}]",
            "temperature",
        )
        self._check(0.0 < self.top_p <= 1.0, "top_p must be in (0, 1]", "top_p")
        self._check(self.top_k >= 0, "top_k must be -1, 0 (off) or positive", "top_k")
        self._check(0.0 <= self.min_p <= 1.0, "min_p must be in [0, 1]", "min_p")
        self._check(self.max_tokens is None or self.max_tokens >= 1, "max_tokens must be at least 1", "max_tokens")
        self._check(self.min_tokens >= 0, "min_tokens must be >= 0", "min_tokens")
        self._check(
            self.max_tokens is None or self.min_tokens <= self.max_tokens,
            "min_tokens must not exceed max_tokens",
            "min_tokens",
        )
        self._check(
            self.logprobs is None or 0 <= self.logprobs <= MAX_LOGPROBS,
            f"logprobs must be between 0 and {MAX_LOGPROBS}",
            "logprobs",
        )
        self._check(-2.0 <= self.presence_penalty <= 2.0, "presence_penalty must be in [-2, 2]", "presence_penalty")
        self._check(-2.0 <= self.frequency_penalty <= 2.0, "frequency_penalty must be in [-2, 2]", "frequency_penalty")
        self._check(all(t >= 0 for t in self.stop_token_ids), "stop_token_ids must be >= 0", "stop_token_ids")
        self._check(all(t >= 0 for t in self.logit_bias), "logit_bias token ids must be >= 0", "logit_bias")
        self._check(
            all(-MAX_LOGIT_BIAS <= b <= MAX_LOGIT_BIAS for b in self.logit_bias.values()),
            f"logit_bias values must be in [-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}]",
            "logit_bias",
        )
        # Under min_tokens the end-of-sequence tokens are suppressed, while a finished grammar allows nothing else.
        self._check(
            self.structured is None or self.min_tokens == 0,
            "min_tokens cannot be combined with structured output: the grammar decides where the output ends",
            "min_tokens",
        )
        self._check(
            self.pooling is None
            or (self.n == 1 and self.max_tokens == 1 and self.logprobs is None and self.structured is None),
            "an embedding request takes one prompt pass: n=1, max_tokens=1, no logprobs or structured output",
            "input",
        )

    @staticmethod
    def _check(ok: bool, message: str, param: str) -> None:
        if not ok:
            raise RequestError(message, param=param)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def has_penalties(self) -> bool:
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    @property
    def adjusts_logits(self) -> bool:
        """Penalties or a logit bias: the sampled distribution is not the model's, so neither the argmax shortcut
        nor draft verification (which compares the model's own distributions) applies."""
        return self.has_penalties or bool(self.logit_bias)
