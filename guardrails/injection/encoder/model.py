"""The shipped injection encoder (weights.npz, tokenizer.json, report.json beside this file): text -> a score in
[0, 1] calibrated like the n-gram model's (the operating point picked on held-out writers maps to 0.5).

Loaded once per process (`shipped_encoder`, 20 MB on disk, ~70 MB in memory, ~0.7 s); ONNX Runtime (network.py)
and the `tokenizers` library, no torch. A prompt longer than MAX_TOKENS is read as its head and its tail, as in
training: an injection sits at the start or the end of a pasted document far more often than in its middle, and the
cost of the forward pass grows with every token (~6 ms for 100 tokens on one core).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from guardrails.injection.encoder.network import Network

ENCODER_DIR = Path(__file__).resolve().parent
WEIGHTS_PATH = ENCODER_DIR / "weights.npz"
TOKENIZER_PATH = ENCODER_DIR / "tokenizer.json"
REPORT_PATH = ENCODER_DIR / "report.json"
MAX_TOKENS = 160  # with [CLS] and [SEP]


@dataclass(frozen=True)
class TextTokenizer:
    """WordPiece ids of a text, head and tail kept when it is long, wrapped in [CLS] ... [SEP]."""

    tokenizer: Tokenizer
    cls_id: int
    sep_id: int
    max_tokens: int = MAX_TOKENS

    @classmethod
    def load(cls, path: Path = TOKENIZER_PATH, max_tokens: int = MAX_TOKENS) -> TextTokenizer:
        tokenizer = Tokenizer.from_file(str(path))
        # The checkpoint's file pads and truncates to 128; the encoder truncates its own way and never pads.
        tokenizer.no_padding()
        tokenizer.no_truncation()
        cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
        if cls_id is None or sep_id is None:
            raise ValueError(f"{path}: not a BERT WordPiece tokenizer (no [CLS] or [SEP])")
        return cls(tokenizer, cls_id, sep_id, max_tokens)

    def ids(self, text: str) -> list[int]:
        return self.wrap(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def ids_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.wrap(e.ids) for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def wrap(self, ids: list[int]) -> list[int]:
        room = self.max_tokens - 2
        if len(ids) > room:
            head = room // 2
            ids = ids[:head] + ids[len(ids) - (room - head) :]
        return [self.cls_id, *ids, self.sep_id]


@dataclass(frozen=True)
class EncoderModel:
    network: Network
    tokenizer: TextTokenizer
    threshold: float
    """Raw probability at which a prompt is an injection (picked on held-out writers; report.json)."""

    def raw_probability(self, text: str) -> float:
        return _sigmoid(self._raw_logit(text))

    def score(self, text: str) -> float:
        """P(injection) with the operating point moved to 0.5."""
        return _sigmoid(self._raw_logit(text) - _logit(self.threshold))

    def _raw_logit(self, text: str) -> float:
        return self.network.logit(self.tokenizer.ids(text))

    @classmethod
    def load(cls, folder: Path = ENCODER_DIR) -> EncoderModel:
        report = json.loads((folder / REPORT_PATH.name).read_text())
        network = Network.load(folder / WEIGHTS_PATH.name)
        tokenizer = TextTokenizer.load(folder / TOKENIZER_PATH.name, network.max_positions)
        return cls(network, tokenizer, float(report["threshold"]))


@functools.cache
def shipped_encoder() -> EncoderModel:
    """The encoder in the package, loaded on first use and shared by every detector and thread (ONNX Runtime
    releases the GIL while it runs, so concurrent checks overlap, each on a core)."""
    return EncoderModel.load(ENCODER_DIR)


def _sigmoid(x: float) -> float:
    return 0.5 * (1.0 + math.tanh(0.5 * x))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))
