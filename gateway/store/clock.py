"""Bucket arithmetic and budget periods in Python, mirroring admit.lua / settle.lua line for line.

A bucket holds `level` units (capacity = limit = one minute's allowance) and refills at limit/60 per second:

    level(now) = min(limit, level(t) + (now - t) * limit / 60_000)      # times in ms
"""

from __future__ import annotations

import calendar
import time

MINUTE_MS = 60_000
# An idle bucket is full again after at most two minutes (from minus one minute's allowance); keys expire then.
BUCKET_TTL_MS = 130_000


def refill(level: float, t_ms: int, now_ms: int, limit: int) -> float:
    return min(float(limit), level + (now_ms - t_ms) * limit / MINUTE_MS)


def reset_ms(level: float, limit: int) -> int:
    """Time until the bucket is full again."""
    return max(0, int((limit - level) * MINUTE_MS / limit))


def periods(now_ms: int) -> tuple[str, str, int, int]:
    """(day 'YYYYMMDD', month 'YYYYMM', ms to the next UTC day, ms to the next UTC month)."""
    tm = time.gmtime(now_ms // 1000)
    day_start_s = calendar.timegm((tm.tm_year, tm.tm_mon, tm.tm_mday, 0, 0, 0))
    next_month = (tm.tm_year + tm.tm_mon // 12, tm.tm_mon % 12 + 1)
    month_end_s = calendar.timegm((*next_month, 1, 0, 0, 0))
    return (
        f"{tm.tm_year:04d}{tm.tm_mon:02d}{tm.tm_mday:02d}",
        f"{tm.tm_year:04d}{tm.tm_mon:02d}",
        (day_start_s + 86_400) * 1000 - now_ms,
        month_end_s * 1000 - now_ms,
    )


def now_ms() -> int:
    return time.time_ns() // 1_000_000
