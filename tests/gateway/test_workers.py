"""`sluicegate gateway --workers N`: N processes on one port sharing one Redis and reporting one set of metrics;
refused without Redis, where each worker would hold tenants, keys and buckets of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import openai
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway import cli, metrics
from tests.gateway.conftest import PREFIX, REDIS_URL, flush_prefix, gateway_config
from tests.gateway.servers import free_port
from tests.gateway.test_concurrency import _wait_ready

KEY = "sk-sg-workers-test"


def test_workers_share_one_redis_and_count_as_instances(fake, tokenizer_dir, tmp_path, clean_redis, monkeypatch):
    prefix = f"{PREFIX}workers-{uuid.uuid4().hex[:6]}:"
    seed = tmp_path / "tenants.yaml"
    seed.write_text(yaml.safe_dump({"tenants": [{"id": "w", "rpm": 12, "keys": [{"name": "k", "key": KEY}]}]}))
    config_path = tmp_path / "gateway.yaml"
    config_path.write_text(
        yaml.safe_dump(
            gateway_config([fake.url], tokenizer_dir, REDIS_URL, prefix=prefix, tenants_seed=str(seed), num_instances=3)
        )
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluicegate.cli",
            "gateway",
            "--config",
            str(config_path),
            "--port",
            str(port),
            "--workers",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, proc)
        _wait_both_workers_listen(url, proc)
        statuses, workers = [], set()
        for _ in range(15):  # a client (a connection) per request: the kernel hands connections to either worker
            client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=30)
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
                )
                workers.add(_worker_of(raw.headers))
                statuses.append(200)
            except openai.RateLimitError as refused:
                workers.add(_worker_of(refused.response.headers))
                statuses.append(429)
            finally:
                client.close()
        assert statuses == [200] * 12 + [429] * 3  # one rpm bucket across both workers
        assert len(workers) == 2  # both answered (15 connections all to one worker: ~1 in 16,000)
        # /metrics reports both workers, whichever of them answers the scrape
        for _ in range(4):
            answered = _requests_by_status(httpx.get(url + "/metrics", timeout=5).text)
            assert answered.get("200") == 12 and answered.get("429") == 3, answered
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        flush_prefix(prefix=prefix)
    # Each worker is a gateway instance: fail-open local buckets divide each limit by every worker of every gateway.
    monkeypatch.setenv("SLUICEGATE_GATEWAY_CONFIG", str(config_path))
    monkeypatch.setenv("SLUICEGATE_GATEWAY_WORKERS", "2")
    assert cli._app_factory().state.gateway.config.num_instances == 6


def _worker_of(headers: httpx.Headers) -> str:
    return headers["x-request-id"].rsplit("-", 1)[0]  # req-<worker>-<n>


def _wait_both_workers_listen(url: str, proc: subprocess.Popen) -> None:
    """/health answers once one worker is up; the other may still be starting (on a busy machine, seconds later), and
    until it listens the kernel hands every connection to the first. A fresh connection per probe finds both."""
    seen: set[str] = set()
    deadline = time.monotonic() + 60
    while len(seen) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, f"workers answering: {seen}"
        seen.add(_worker_of(httpx.get(url + "/health", timeout=5).headers))
        time.sleep(0.05)


def _requests_by_status(text: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "sluicegate_requests":
            for sample in family.samples:
                if sample.name == "sluicegate_requests_total":
                    status = sample.labels["status"]
                    totals[status] = totals.get(status, 0) + sample.value
    return totals


def test_workers_without_redis_are_refused(tokenizer_dir, tmp_path, capsys):
    config_path = tmp_path / "gateway.yaml"
    config_path.write_text(yaml.safe_dump(gateway_config(["http://127.0.0.1:9"], tokenizer_dir)))
    assert cli.main(["--config", str(config_path), "--workers", "2"]) == 2
    assert "--workers needs Redis" in capsys.readouterr().err


def test_a_workers_run_leaves_the_environment_as_it_found_it(tmp_path, monkeypatch):
    """A gateway built later in the same process must not find the run's (deleted) metrics directory."""
    import uvicorn

    config_path = tmp_path / "gateway.yaml"
    config_path.write_text(yaml.safe_dump(gateway_config(["http://127.0.0.1:9"], None, REDIS_URL)))
    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: seen.update(os.environ))
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    assert cli.main(["--config", str(config_path), "--workers", "2"]) == 0
    assert seen["SLUICEGATE_GATEWAY_WORKERS"] == "2" and seen["PROMETHEUS_MULTIPROC_DIR"]
    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ and "SLUICEGATE_GATEWAY_WORKERS" not in os.environ
    assert not Path(seen["PROMETHEUS_MULTIPROC_DIR"]).exists()


def test_a_dead_workers_live_gauges_leave_the_totals(tmp_path):
    """uvicorn replaces a crashed worker without running its shutdown: the scrape drops that worker's live gauges."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    for pid in (dead.pid, os.getpid()):
        (tmp_path / f"gauge_livesum_{pid}.db").write_bytes(b"")
    metrics._forget_dead_workers(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"gauge_livesum_{os.getpid()}.db"]
