"""`sluicegate bench console [--json]`: how long the admin console's pages take with many tenants.

A gateway (in-process store, or Redis with `--redis URL` under a key prefix of its own, removed afterwards) gets
`--tenants` tenants (default 1,000), each with a key, through the admin API; the console is logged in once and each
page is fetched once cold and then `--rounds` times over loopback. Reports the first fetch, the median and the p95
per page in milliseconds, and the page's size. Not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
import uuid
from typing import Any

import httpx
import uvicorn

from gateway.app import build_app
from gateway.config import config_from_dict

ADMIN_TOKEN = "bench-console-token"
PAGES = ("/tenants", "/tenants?page=10", "/tenants?q=tenant-09", "/tenants/tenant-0500", "/refusals", "/replicas")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _seed(url: str, num_tenants: int) -> None:
    api = httpx.Client(base_url=url + "/admin/v1", headers={"authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)
    for i in range(num_tenants):
        limits = {"rpm": 600, "input_tpm": 100_000, "output_tpm": 20_000, "daily_tokens": 1_000_000}
        assert api.post("/tenants", json={"id": f"tenant-{i:04d}", **limits}).status_code == 201
        assert api.post(f"/tenants/tenant-{i:04d}/keys", json={"name": "bench"}).status_code == 201


def _drop(url: str, num_tenants: int) -> None:
    api = httpx.Client(base_url=url + "/admin/v1", headers={"authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)
    for i in range(num_tenants):
        api.delete(f"/tenants/tenant-{i:04d}")


def _measure(url: str, rounds: int) -> dict[str, dict[str, float]]:
    client = httpx.Client(base_url=url + "/admin", timeout=60)
    assert client.post("/login", data={"token": ADMIN_TOKEN}).status_code == 303, "login failed"
    out = {}
    for path in PAGES:
        started = time.perf_counter()
        client.get(path)  # the first fetch: a cold tenant list (the list pages keep one for a few seconds)
        first_ms = (time.perf_counter() - started) * 1000
        times_ms, size = [], 0
        for _ in range(rounds):
            started = time.perf_counter()
            response = client.get(path)
            times_ms.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (path, response.status_code)
            size = len(response.content)
        times_ms.sort()
        out[path] = {
            "first_ms": round(first_ms, 2),
            "median_ms": round(statistics.median(times_ms), 2),
            "p95_ms": round(times_ms[max(0, -(-len(times_ms) * 95 // 100) - 1)], 2),
            "kib": round(size / 1024, 1),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sluicegate bench console", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--redis", help="a Redis URL (default: the in-process store)")
    args = parser.parse_args(argv)

    config: dict[str, Any] = {"admin_token": ADMIN_TOKEN, "models": {"tiny": {"replicas": ["http://127.0.0.1:9"]}}}
    if args.redis:
        config["redis"] = {"url": args.redis, "key_prefix": f"sgbench:{uuid.uuid4().hex[:8]}:"}
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = uvicorn.Server(uvicorn.Config(build_app(config_from_dict(config)), port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        started = time.perf_counter()
        _seed(url, args.tenants)
        seed_s = time.perf_counter() - started
        results = _measure(url, args.rounds)
    finally:
        if args.redis:
            _drop(url, args.tenants)
        server.should_exit = True
        thread.join(timeout=10)
    store = "redis" if args.redis else "in-process"
    if args.json:
        print(json.dumps({"tenants": args.tenants, "store": store, "pages": results}))
        return 0
    print(f"{args.tenants} tenants, {store} store (seeded through the admin API in {seed_s:.1f}s)")
    print(f"{'page':<28}{'first ms':>10}{'median ms':>10}{'p95 ms':>10}{'KiB':>8}")
    for path, row in results.items():
        print(f"{path:<28}{row['first_ms']:>10}{row['median_ms']:>10}{row['p95_ms']:>10}{row['kib']:>8}")
    return 0
