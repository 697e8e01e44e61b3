"""Percentiles and 95% confidence intervals over replays (Student's t: replays are few)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

# Two-sided 95% quantiles of Student's t by degrees of freedom; beyond the table the normal 1.96 is close enough.
_T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
}


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        return float("nan")
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def t95(dof: int) -> float:
    if dof in _T95:
        return _T95[dof]
    below = [d for d in _T95 if d < dof]
    return _T95[max(below)] if dof <= 30 else 1.96


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """(mean, half-width of its 95% interval); half-width 0 for a single replay (no spread to estimate)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
