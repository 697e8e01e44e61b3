"""The Mooncake request traces shipped with the repository (bench/data/workloads/, provenance in its README.md).

Each line of a trace: `{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}`, where
`hash_ids` name ~512-token blocks as a chain (an id covers every block before it), so two requests share a prefix
exactly as far as their lists agree from the start. The files ship gzipped (about 4x smaller); plain `.jsonl` is read
too, for traces a user brings.
"""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

TRACE_BLOCK_TOKENS = 512  # the tokens one Mooncake hash id stands for

# sample_sessions: a block this many requests share can name a session whatever the trace's length.
_MIN_SHARED_CAP = 8

_WORKLOADS_DIR = Path(__file__).resolve().parent / "data" / "workloads"

# Trace name (the `--trace` choices) -> the shipped file; package data, so present in a wheel install too.
DEFAULT_TRACES: dict[str, Path] = {
    "conversation": _WORKLOADS_DIR / "mooncake_conversation_trace.jsonl.gz",
    "synthetic": _WORKLOADS_DIR / "mooncake_synthetic_trace.jsonl.gz",
}


@dataclass(frozen=True)
class TraceRequest:
    arrival_s: float  # offset from the trace's start
    prompt_tokens: int
    output_tokens: int
    block_hashes: list[int]  # the chained ~512-token block ids of the prompt


def _open_text(path: Path) -> IO[str]:
    # Decide by magic bytes, not the suffix, so a renamed file still reads.
    with path.open("rb") as probe:
        is_gzip = probe.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", encoding="utf-8") if is_gzip else path.open(encoding="utf-8")


def load_mooncake_trace(path: str | Path, limit: int | None = None) -> list[TraceRequest]:
    """The first `limit` requests (all when None) of a Mooncake trace, `.jsonl` or `.jsonl.gz`, in file order."""
    requests: list[TraceRequest] = []
    with _open_text(Path(path)) as lines:
        for line in lines:
            if limit is not None and len(requests) >= limit:
                break
            if not line.strip():
                continue
            row = json.loads(line)
            requests.append(
                TraceRequest(
                    arrival_s=row["timestamp"] / 1000.0,
                    prompt_tokens=row["input_length"],
                    output_tokens=row["output_length"],
                    block_hashes=list(row["hash_ids"]),
                )
            )
    return requests


def sample_sessions(
    requests: list[TraceRequest], num_requests: int, seed: int, max_shared_fraction: float = 0.01
) -> list[TraceRequest]:
    """`num_requests` requests of the trace taken whole session by whole session, in trace order.

    The first requests of a trace are a poor slice of it: conversations have only begun, so the first 240 requests of
    the shipped traces reuse 5.5-6.3% of their blocks in one unbounded cache, against 37% (conversation) and 64%
    (synthetic) over the whole trace. Reuse needs a shared first block (the ids are chained), so grouping requests by
    the first block of their prompt that few requests share (at most `max_shared_fraction` of the trace: a system
    prompt every request starts with is skipped; a block fewer than `_MIN_SHARED_CAP` share always names a session,
    so small traces group too) keeps a conversation's turns together. Sessions are drawn in a seeded order, each
    taken whole if it still fits; the sample keeps about the whole trace's reuse (240 requests: 26-33% conversation,
    58-67% synthetic over seeds 0-2) and its timestamps, so its bursts stay.
    """
    uses = Counter(hash_id for request in requests for hash_id in request.block_hashes)
    shared_cap = max(_MIN_SHARED_CAP, int(max_shared_fraction * len(requests)))
    sessions: dict[tuple[str, int], list[int]] = {}
    for index, request in enumerate(requests):
        root = next((hash_id for hash_id in request.block_hashes if uses[hash_id] <= shared_cap), None)
        key = ("block", root) if root is not None else ("request", index)  # only widely shared blocks: alone
        sessions.setdefault(key, []).append(index)
    order = list(sessions.values())
    random.Random(seed).shuffle(order)
    chosen: list[int] = []
    for session in order:
        if len(chosen) + len(session) <= num_requests:
            chosen.extend(session)
        if len(chosen) == num_requests:
            break
    return [requests[index] for index in sorted(chosen)]


def trace_prompt(row: TraceRequest, num_words: int, block_text: Callable[[int], str], blocks: dict[int, str]) -> str:
    """The first `num_words` words of the request's blocks, each hash id's text made once by `block_text` and kept
    in `blocks`, so requests share word prefixes exactly as far as their hash ids agree."""
    for hash_id in row.block_hashes:
        if hash_id not in blocks:
            blocks[hash_id] = block_text(hash_id)
    words = " ".join(blocks[h] for h in row.block_hashes).split()
    return " ".join(words[:num_words])
