"""Accuracy under concurrency: two gateway processes share one Redis; 50 concurrent clients of one tenant for
10 s. Admitted output tokens never exceed the allowance (one minute's capacity + refill over the run) by more
than one request's reservation, and the limit does not fire early either."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid

import httpx
import yaml

from tests.gateway.conftest import PREFIX, REDIS_URL, flush_prefix, gateway_config
from tests.gateway.servers import free_port

OUTPUT_TPM = 600
MAX_TOKENS = 10
CLIENTS = 50
RUN_S = 10.0
KEY = "sk-sg-concurrency-test"


def _start_gateway(config_path, port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sluicegate.cli", "gateway", "--config", str(config_path), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait_ready(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError(f"gateway {url} did not start")


async def _hammer(urls: list[str]) -> tuple[list[int], float]:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "count me"}],
        "max_tokens": MAX_TOKENS,
        "fake": {"tokens": MAX_TOKENS},
    }
    statuses: list[int] = []
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=CLIENTS)) as client:
        started = time.monotonic()

        async def one_client(i: int) -> None:
            url = urls[i % len(urls)] + "/v1/chat/completions"
            while time.monotonic() - started < RUN_S:
                response = await client.post(url, json=body, headers={"authorization": f"Bearer {KEY}"})
                statuses.append(response.status_code)
                if response.status_code == 429:
                    await asyncio.sleep(0.05)

        await asyncio.gather(*(one_client(i) for i in range(CLIENTS)))
        elapsed_s = time.monotonic() - started
    return statuses, elapsed_s


def test_two_gateways_share_the_limit(fake, tokenizer_dir, tmp_path, clean_redis):
    prefix = f"{PREFIX}conc-{uuid.uuid4().hex[:6]}:"
    seed = tmp_path / "tenants.yaml"
    seed.write_text(
        yaml.safe_dump(
            {"tenants": [{"id": "busy", "output_tpm": OUTPUT_TPM, "rpm": 100_000, "keys": [{"name": "k", "key": KEY}]}]}
        )
    )
    # A 100 ms Redis timeout turns a busy CI box's scheduling stall into a 503; this test is about exact limits.
    slow_box = {"socket_timeout_s": 2.0}
    config = gateway_config([fake.url], tokenizer_dir, REDIS_URL, prefix=prefix, tenants_seed=str(seed), redis=slow_box)
    config_path = tmp_path / "gateway.yaml"
    config_path.write_text(yaml.safe_dump(config))
    ports = [free_port(), free_port()]
    procs = [_start_gateway(config_path, port) for port in ports]
    try:
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        for url, proc in zip(urls, procs):
            _wait_ready(url, proc)
        received_before = len(fake.received)
        statuses, elapsed_s = asyncio.run(_hammer(urls))
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)
        flush_prefix(prefix=prefix)
    admitted = statuses.count(200)
    assert set(statuses) <= {200, 429}, sorted(set(statuses))
    # Every admitted request reached the upstream. Not "exactly once": one CI run saw 72 deliveries for 70 answers
    # (a resend after a lost connection, as attempt.py's stale-connection retry does, is the suspect); a resend
    # costs the upstream work, not the tenant tokens, which the allowance below checks.
    assert len(fake.received) - received_before >= admitted
    admitted_tokens = admitted * MAX_TOKENS
    allowance = OUTPUT_TPM + OUTPUT_TPM / 60 * elapsed_s
    assert admitted_tokens <= allowance + MAX_TOKENS, (admitted_tokens, allowance)
    assert admitted_tokens >= OUTPUT_TPM, (admitted_tokens, allowance)  # at least the full minute's capacity
    assert statuses.count(429) > 0
