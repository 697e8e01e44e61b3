"""Live usage per tenant: requests and tokens per minute against the tenant's limits, and the daily and monthly
budgets burning down.

The store keeps usage per UTC day (settled requests and tokens; shared by every gateway through Redis). A rate
needs two readings, so the console samples a tenant's day counters each time its usage is shown (the page refreshes
itself every few seconds) and keeps the recent samples in process. The rate at a sample is what was used in the
minute before it, comparable with a per-minute limit as it stands: never scaled up from a shorter gap (three
requests a second apart read 3 / min, not 180), scaled down when the samples are further apart than a minute. A
tenant nobody is watching costs nothing.
"""

from __future__ import annotations

import calendar
import collections
from dataclasses import dataclass
from typing import Any

from gateway.admin.api import usage_day, usage_total
from gateway.admin.console.charts import Chart, line_chart
from gateway.admin.tenants import Tenant
from gateway.store.base import AdminStore
from gateway.store.clock import periods

SAMPLE_MIN_INTERVAL_S = 1.0
"""Readings closer together than this reuse the last one (several open pages, a refresh storm)."""
HISTORY_S = 10 * 60
"""How far back the rate charts reach."""
RATE_WINDOW_S = 60.0
MAX_TRACKED_TENANTS = 1000
"""Tenants whose samples are kept; the least recently viewed go first."""
COUNTERS = ("requests", "input_tokens", "output_tokens")


@dataclass(frozen=True, slots=True)
class UsageSample:
    at_s: float
    day: str
    requests: int
    input_tokens: int
    output_tokens: int

    def count(self, name: str) -> int:
        value: int = getattr(self, name)
        return value


class UsageSampler:
    def __init__(self) -> None:
        self._by_tenant: collections.OrderedDict[str, collections.deque[UsageSample]] = collections.OrderedDict()

    def add(self, tenant_id: str, sample: UsageSample) -> list[UsageSample]:
        """Keeps `sample` (unless the last one is very recent) and returns the tenant's samples, oldest first."""
        samples = self._by_tenant.pop(tenant_id, None) or collections.deque()
        self._by_tenant[tenant_id] = samples
        if len(self._by_tenant) > MAX_TRACKED_TENANTS:
            self._by_tenant.popitem(last=False)
        if not samples or sample.at_s - samples[-1].at_s >= SAMPLE_MIN_INTERVAL_S:
            samples.append(sample)
        while samples and sample.at_s - samples[0].at_s > HISTORY_S:
            samples.popleft()
        return list(samples)


def per_minute(samples: list[UsageSample], name: str, now_s: float) -> list[tuple[float, float]]:
    """(seconds before now, use in the minute before) at each sample after the first. The reading it counts from
    is the latest at least a minute older, else the oldest there is, of the same UTC day (counters restart at
    00:00: the first sample of a day has no rate)."""
    rates = []
    j = 0  # the base's index: it only moves forward as the samples do
    for i in range(1, len(samples)):
        after = samples[i]
        while j < i and samples[j].day != after.day:
            j += 1
        while j + 1 < i and after.at_s - samples[j + 1].at_s >= RATE_WINDOW_S:
            j += 1
        if j >= i:
            continue
        base = samples[j]
        used = max(after.count(name) - base.count(name), 0)
        rates.append((after.at_s - now_s, used * RATE_WINDOW_S / max(after.at_s - base.at_s, RATE_WINDOW_S)))
    return rates


@dataclass(frozen=True, slots=True)
class Budget:
    period: str
    """'daily' or 'monthly'."""
    limit: int
    """0: no budget."""
    used: int
    chart: Chart

    @property
    def left(self) -> int:
        return max(self.limit - self.used, 0)

    @property
    def used_percent(self) -> float:
        return 100.0 * self.used / self.limit if self.limit else 0.0


@dataclass(frozen=True, slots=True)
class SpendLine:
    """One model's or key's spend this month, in USD at the models' prices (docs/operations.md, "Spend")."""

    name: str
    input_tokens: int
    output_tokens: int
    cost_usd: float


@dataclass(frozen=True, slots=True)
class Spend:
    today_usd: float
    month_usd: float
    daily_budget_usd: float
    """0: no budget in USD."""
    monthly_budget_usd: float
    by_model: list[SpendLine]
    by_key: list[SpendLine]


@dataclass(frozen=True, slots=True)
class TenantUsage:
    tenant: Tenant
    today: UsageSample
    rates: list[Chart]
    budgets: list[Budget]
    spend: Spend


async def tenant_usage(store: AdminStore, sampler: UsageSampler, tenant: Tenant, now_s: float) -> TenantUsage:
    today_name, month_name, _, _ = periods(int(now_s * 1000))
    days = [f"{month_name}{d:02d}" for d in range(1, int(today_name[-2:]) + 1)]
    raw = await store.usage(tenant.id, days)
    by_day = {day: usage_day(day, raw[day]) if day in raw else {} for day in days}
    today_counts = by_day[today_name]
    today = UsageSample(now_s, today_name, *(int(today_counts.get(name, 0)) for name in COUNTERS))
    samples = sampler.add(tenant.id, today)
    limits = (tenant.rpm, tenant.input_tpm, tenant.output_tpm)
    titles = ("Requests / min", "Input tokens / min", "Output tokens / min")
    rates = [
        line_chart(title, "per min", per_minute(samples, name, now_s), (-HISTORY_S, 0.0), limit)
        for title, name, limit in zip(titles, COUNTERS, limits)
    ]
    days_in_month = calendar.monthrange(int(month_name[:4]), int(month_name[4:]))[1]
    budgets = [_daily(tenant, samples, today), _monthly(tenant, by_day, days_in_month)]
    return TenantUsage(tenant, today, rates, budgets, _spend(tenant, today_counts, by_day))


def _spend(tenant: Tenant, today: dict[str, Any], by_day: dict[str, dict[str, Any]]) -> Spend:
    month = usage_total([day for day in by_day.values() if day])
    lines = {
        scope: [
            SpendLine(name, int(c.get("input_tokens", 0)), int(c.get("output_tokens", 0)), float(c.get("cost_usd", 0)))
            for name, c in sorted(month[scope].items())
        ]
        for scope in ("by_model", "by_key")
    }
    return Spend(
        float(today.get("cost_usd", 0.0)),
        float(month["cost_usd"]),
        tenant.daily_budget_usd,
        tenant.monthly_budget_usd,
        lines["by_model"],
        lines["by_key"],
    )


def _tokens(counts: dict[str, Any] | UsageSample) -> int:
    if isinstance(counts, UsageSample):
        return counts.input_tokens + counts.output_tokens
    return int(counts.get("input_tokens", 0)) + int(counts.get("output_tokens", 0))


def _daily(tenant: Tenant, samples: list[UsageSample], today: UsageSample) -> Budget:
    """Today's budget through the UTC day (x: seconds since 00:00): all of it at midnight, then what was left at
    each sample (the tokens used, without a budget)."""
    limit = tenant.daily_tokens
    midnight_s = today.at_s - today.at_s % 86_400
    series = [(0.0, _left_or_used(limit, 0))]
    series += [(s.at_s - midnight_s, _left_or_used(limit, _tokens(s))) for s in samples if s.day == today.day]
    title = "Daily budget left (tokens)" if limit else "Tokens today (no daily budget)"
    return Budget("daily", limit, _tokens(today), line_chart(title, "tokens", series, (0.0, 86_400.0), limit))


def _monthly(tenant: Tenant, by_day: dict[str, dict[str, Any]], days_in_month: int) -> Budget:
    """This month's budget by day (x: days): all of it at the start, then what was left at the end of each day so
    far (today: so far)."""
    limit, used = tenant.monthly_tokens, 0
    series = [(0.0, _left_or_used(limit, 0))]
    for number, day in enumerate(by_day, start=1):
        used += _tokens(by_day[day])
        series.append((float(number), _left_or_used(limit, used)))
    title = "Monthly budget left by day (tokens)" if limit else "Tokens this month by day (no monthly budget)"
    chart = line_chart(title, "tokens", series, (0.0, float(days_in_month)), limit)
    return Budget("monthly", limit, used, chart)


def _left_or_used(limit: int, used: int) -> float:
    return float(max(limit - used, 0) if limit else used)
