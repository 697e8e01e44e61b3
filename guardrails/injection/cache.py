"""ScoreCache: the detector's results for texts seen lately, so a conversation's earlier turns, sent again with every
request, are not scored again: the encoder costs ~6 ms for 100 tokens on one core, and a chat's history grows by a
turn a request."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

from guardrails.injection.detector import InjectionResult

DEFAULT_MAX_ENTRIES = 8192  # ~1 MB: a 16-byte digest and a small result each


class ScoreCache:
    """A least-recently-used map from a text's digest to its InjectionResult, safe across the threads the gateway
    scores in (guardrails.engine runs checks in asyncio.to_thread). The score of a text depends on the text alone, so
    entries never go stale while the process keeps its models."""

    def __init__(self, score: Callable[[str], InjectionResult], max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self._score = score
        self._max_entries = max_entries
        self._entries: OrderedDict[bytes, InjectionResult] = OrderedDict()
        self._lock = threading.Lock()

    def score(self, text: str) -> InjectionResult:
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None:
                self._entries.move_to_end(key)
                return cached
        result = self._score(text)  # outside the lock: two threads may score one new text, never wait on each other
        with self._lock:
            self._entries[key] = result
            self._entries.move_to_end(key)
            if len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
        return result

    def __len__(self) -> int:
        return len(self._entries)
