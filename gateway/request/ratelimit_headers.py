"""x-ratelimit-* headers (OpenAI's names and duration format), sent on every admitted or rate-limited response.

`-requests`, `-input-tokens` and `-output-tokens` describe the three buckets (the tighter of tenant and key);
`-tokens` sums the two token buckets, for clients written against OpenAI's single tokens-per-minute limit.
"""

from __future__ import annotations

from gateway.store.base import INPUT_TOKENS, OUTPUT_TOKENS, REQUESTS, BucketView


def duration(seconds: float) -> str:
    """OpenAI's format: 20ms, 1.5s, 6m0s."""
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    minutes, rest = divmod(round(seconds, 3), 60)
    return f"{int(minutes)}m{rest:g}s" if minutes else f"{rest:g}s"


def _put(headers: list[tuple[bytes, bytes]], suffix: str, view: BucketView) -> None:
    headers.append((b"x-ratelimit-limit-" + suffix.encode(), str(view.limit).encode()))
    headers.append((b"x-ratelimit-remaining-" + suffix.encode(), str(view.remaining).encode()))
    headers.append((b"x-ratelimit-reset-" + suffix.encode(), duration(view.reset_s).encode()))


def ratelimit_headers(buckets: dict[str, BucketView]) -> list[tuple[bytes, bytes]]:
    headers: list[tuple[bytes, bytes]] = []
    if not buckets:
        return headers
    if REQUESTS in buckets:
        _put(headers, "requests", buckets[REQUESTS])
    token_views = [buckets[name] for name in (INPUT_TOKENS, OUTPUT_TOKENS) if name in buckets]
    if token_views:
        _put(
            headers,
            "tokens",
            BucketView(
                sum(v.limit for v in token_views),
                sum(v.remaining for v in token_views),
                max(v.reset_s for v in token_views),
            ),
        )
    if INPUT_TOKENS in buckets:
        _put(headers, "input-tokens", buckets[INPUT_TOKENS])
    if OUTPUT_TOKENS in buckets:
        _put(headers, "output-tokens", buckets[OUTPUT_TOKENS])
    return headers
