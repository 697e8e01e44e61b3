"""The gateway's access log: one JSON line per finished completion request on the `sluicegate.access` logger
(stdout by default; `access_log: false` in the gateway config turns it off), refusals (401, 400, 429 ...) included.

It is written from the one place every request ends (request/settlement.py's Reservation): a request admitted by
the store is logged by its settlement task once the tokens it is charged are known, any other when it ends. A line
holds who, what and how long, never the prompt or the answer:

    {"time": "2026-12-01T23:59:59.123Z", "request_id": "req-1a2b3c4d-17", "client_request_id": null,
     "tenant": "acme", "key_id": "k_1234abcd5678", "key_name": "ci", "model": "tiny", "replica": "r0",
     "prefill_replica": null, "status": 200, "error": null, "prompt_tokens": 812, "completion_tokens": 64, "cached_tokens": 800,
     "ttft_ms": 41.2, "duration_ms": 310.5, "stream": true}

`prefill_replica` names the prefill replica whose KV handoff the answering replica got (a disaggregated model's
prefill hop, docs/architecture.md); null when it got none. `ttft_ms` is the replica's first token as the gateway saw it (a non-streamed answer: the whole answer); null when
none came. `cached_tokens` is the replica's `usage.prompt_tokens_details.cached_tokens`, when it reports one.
Building the line is one dict and one json.dumps per request; the loop then puts the string on a queue, and a
thread of its own writes it (sluicegate/json_logs.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gateway.request.attempt import UpstreamAttempt
from gateway.request.context import Outcome, RequestContext, RequestPhase
from sluicegate.json_logs import JsonLines

ACCESS_LOGGER = "sluicegate.access"


@dataclass(frozen=True, slots=True)
class Ending:
    """How a request ended, taken at the moment it ended (its settlement may log it a little later)."""

    phase: RequestPhase
    """Where the request was when it ended: which of the context's fields are set."""
    ended_s: float
    """perf_counter() when the request ended."""
    ended_at: float
    """Unix time it ended."""
    replica: str | None
    """The replica that took it last (None: it was never sent)."""
    prefill_replica: str | None
    """The prefill replica whose handoff `replica` got (None: no handoff)."""
    first_token_s: float
    """perf_counter() of the replica's first token; 0.0 when none came."""
    error: str | None
    """The error code the client got (OpenAI's `code`), also for an error that ended a stream."""


class AccessLog:
    """Writes to the `sluicegate.access` logger; the gateway sends that to stdout when it starts (runtime.py)."""

    def __init__(self) -> None:
        self._lines = JsonLines(ACCESS_LOGGER)

    def ending(self, ctx: RequestContext, attempt: UpstreamAttempt) -> Ending:
        """Read at the request's end, before the attempt is released."""
        error = ctx.delivery.error_code
        if error is None and attempt.outcome == Outcome.ERROR_MID_STREAM:
            error = "upstream_error"
        elif error is None and attempt.cut:
            error = "content_policy_violation"
        return Ending(
            ctx.phase, time.perf_counter(), time.time(), attempt.replica, attempt.prefill_replica,
            attempt.first_token_s, error,
        )  # fmt: skip

    def write(self, ctx: RequestContext, ending: Ending, prompt_tokens: int, completion_tokens: int) -> None:
        identified, authed = ending.phase >= RequestPhase.IDENTIFIED, ending.phase >= RequestPhase.AUTHED
        usage = ctx.delivery.usage or (ctx.delivery.scanner.usage if ctx.delivery.scanner else None)
        shown = ctx.shown_request_id.decode("latin-1")
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(ending.ended_at, UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
            "request_id": ctx.request_id,
            "client_request_id": None if shown == ctx.request_id else shown,
            "tenant": ctx.tenant.id if identified else None,
            "key_id": ctx.key.key_id if identified else None,
            "key_name": ctx.key.name if identified else None,
            "model": ctx.parsed.model if authed else None,
            "replica": ending.replica,
            "prefill_replica": ending.prefill_replica,
            "status": ctx.delivery.status or 499,
            "error": ending.error,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "cached_tokens": _cached_tokens(usage),
            "ttft_ms": round((ending.first_token_s - ctx.received_s) * 1000, 1) if ending.first_token_s else None,
            "duration_ms": round((ending.ended_s - ctx.received_s) * 1000, 1),
            "stream": ctx.parsed.stream if authed else None,
        }
        self._lines.write(json.dumps(line))


def _cached_tokens(usage: dict[str, Any] | None) -> int | None:
    details = (usage or {}).get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return cached if isinstance(cached, int) and not isinstance(cached, bool) else None
