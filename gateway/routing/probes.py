"""Active health: GET /health and a scrape of GET /metrics for the load signals the policies weigh."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

WAITING_METRIC = "vllm:num_requests_waiting"
KV_USAGE_METRIC = "vllm:kv_cache_usage_perc"


def parse_load_metrics(text: str) -> tuple[int, float]:
    """(waiting requests, KV usage fraction) summed over label sets; absent metrics read as 0."""
    waiting = 0.0
    kv_usage = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == WAITING_METRIC:
                waiting += sample.value
            elif sample.name == KV_USAGE_METRIC:
                kv_usage = max(kv_usage, sample.value)
    # vLLM reports a fraction despite the name; a producer that sends percent is scaled down.
    if kv_usage > 1.0:
        kv_usage /= 100.0
    return int(waiting), min(kv_usage, 1.0)


async def probe_health(client: httpx.AsyncClient, url: str, timeout_s: float) -> bool:
    try:
        response = await client.get(f"{url}/health", timeout=timeout_s)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


async def scrape_load(client: httpx.AsyncClient, url: str, timeout_s: float) -> tuple[int, float] | None:
    """The replica's load signals, or None when /metrics is missing or unreadable (then they are left as they were)."""
    try:
        response = await client.get(f"{url}/metrics", timeout=timeout_s)
        if response.status_code != 200:
            return None
        return parse_load_metrics(response.text)
    except (httpx.HTTPError, ValueError):
        return None
