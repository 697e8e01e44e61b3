"""`sluicegate bench gateway [--json]`: what the gateway costs on top of a fast fake upstream on loopback.

Columns, all measured in one run against the same upstream:
  direct     requests straight to the upstream (the floor)
  bare       a bare Starlette + aiohttp pass-through (the floor for a Python gateway)
  sluicegate our gateway with limits on (Redis: a redis-server of the benchmark's own), exact token counting,
             guardrails off
  sg-cluster with --redis-cluster: our gateway again, on a 3-master Redis Cluster of the benchmark's own
             (redis+cluster://), reported as a ratio to the single-node column
  litellm    LiteLLM's proxy with a Redis-backed TPM/RPM limit, installed into its own venv (skipped with a
             message when it cannot be installed)
  sg-inject  with --guardrails: our gateway with the prompt-injection check (`injection_action: block`, the shipped
             encoder), scored before the request goes upstream
  sg-along   the same gateway and check with `injection_alongside: true`: scored while the request goes upstream
             (--upstream-ms gives the upstream a time to first byte, as a replica's queue and prefill would)

Rows: RPS at saturation (closed loop, 64 connections), added latency p50/p99 at a fixed low rate (open loop, the
columns taking turns request by request, so that "added" compares latencies from the same seconds), streaming
time-to-first-chunk added, gateway CPU ms per request and RSS. The gateway under test is pinned to core 0; the
upstream and the load generator share the other cores.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sluicegate.sse import encode_event

# Ordinary requests of ~24 words, in turn, behind a serial number no other request of the run has: the guardrails
# cache a text's scores, and a repeated prompt would cost them nothing. Sentences, not words rotated from one: the
# injection encoder read word salad as suspect, and a benchmark of allowed traffic must be allowed.
_SERIALS = itertools.count()
PROMPTS = (
    "Summarise the attached meeting notes in three short bullet points for the team, keeping the decisions and the "
    "owners of each action.",
    "Write a friendly reply to a customer who asks whether our delivery to Lyon can arrive before Friday afternoon.",
    "Explain in plain words how a hash map handles collisions, with a small example in Python for a new engineer.",
    "Translate this sentence into German for our product page: the kettle boils a litre of water in two minutes.",
    "Suggest five names for a neighbourhood bakery that sells sourdough bread and coffee, and say why each one works.",
    "Give me a packing list for a three day hiking trip in the mountains in early autumn with cold nights expected.",
)
LITELLM_VENV = Path(".sluicegate/bench/litellm-venv")
API_KEY = "sk-sg-bench-key"
MASTER_KEY = "sk-litellm-bench"
GUARDRAIL_POLICIES = {
    "sg-inject": {"injection_action": "block"},
    "sg-along": {"injection_action": "block", "injection_alongside": True},
}
GUARDRAIL_KEYS = {"sg-inject": "sk-sg-bench-inject", "sg-along": "sk-sg-bench-along"}


# ---- the fake upstream: raw asyncio HTTP/1.1, as cheap as an upstream can be ------------------------------------
def _canned(stream: bool, num_chunks: int) -> bytes:
    usage = {"prompt_tokens": 40, "completion_tokens": num_chunks, "total_tokens": 40 + num_chunks}
    if not stream:
        body = json.dumps(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": "bench",
                "usage": usage,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "ok " * num_chunks},
                    }
                ],
            }
        ).encode()
        return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)) + body
    events = []
    for _ in range(num_chunks):
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "bench",
            "choices": [{"index": 0, "delta": {"content": "ok "}, "finish_reason": None}],
        }
        events.append(encode_event(json.dumps(chunk)))
    events.append(
        encode_event(
            json.dumps(
                {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "bench",
                    "choices": [],
                    "usage": usage,
                }
            )
        )
    )
    events.append(encode_event("[DONE]"))
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" + chunked


class _UpstreamProtocol(asyncio.Protocol):
    plain = _canned(False, 8)
    sse = _canned(True, 8)
    delay_s = 0.0
    """Time to first byte: what a replica's queue and prefill would take (--upstream-ms)."""

    def connection_made(self, transport):
        self.transport, self.buf = transport, b""

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower()
            length = 0
            at = head.find(b"content-length:")
            if at >= 0:
                length = int(head[at + 15 :].split(b"\r\n", 1)[0])
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            if head.startswith(b"get"):
                payload = b'{"object":"list","data":[{"id":"bench","object":"model"}]}'
                self.transport.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d"
                    b"\r\n\r\n%s" % (len(payload), payload)
                )
            else:
                streamed = b'"stream": true' in body or b'"stream":true' in body
                self._answer(self.sse if streamed else self.plain)

    def _answer(self, payload: bytes) -> None:
        if self.delay_s:
            asyncio.get_running_loop().call_later(self.delay_s, self._write, payload)
        else:
            self.transport.write(payload)

    def _write(self, payload: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(payload)


def _serve_upstream(port: int, delay_ms: float) -> None:
    import uvloop

    _UpstreamProtocol.delay_s = delay_ms / 1000

    async def run():
        server = await asyncio.get_running_loop().create_server(_UpstreamProtocol, "127.0.0.1", port, backlog=4096)
        await server.serve_forever()

    uvloop.run(run())


# ---- the bare pass-through: Starlette + one aiohttp session ---------------------------------------------------
def _serve_bare(port: int, upstream: str) -> None:
    import aiohttp
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    session: dict = {}

    async def proxy(request):
        if "s" not in session:
            session["s"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1024))
        body = await request.body()
        resp = await session["s"].post(
            upstream + "/v1/chat/completions", data=body, headers={"content-type": "application/json"}
        )
        if resp.content_type == "text/event-stream":

            async def relay():
                async for chunk in resp.content.iter_any():
                    yield chunk
                resp.release()

            return StreamingResponse(relay(), media_type="text/event-stream")
        data = await resp.read()
        return Response(data, media_type="application/json")

    app = Starlette(routes=[Route("/v1/chat/completions", proxy, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", log_level="warning", access_log=False)


# ---- load generation ----------------------------------------------------------------------------------------
def _body(i: int, stream: bool) -> bytes:
    return json.dumps(
        {
            "model": "bench",
            "max_tokens": 16,
            "stream": stream,
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": f"request {next(_SERIALS)}: {PROMPTS[i % len(PROMPTS)]}"},
            ],
        }
    ).encode()


async def _one(session, url: str, headers: dict, i: int, stream: bool) -> float:
    """Seconds to the first body byte (streaming) or to the whole response; raises on a non-200."""
    started = time.perf_counter()
    async with session.post(url, data=_body(i, stream), headers=headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
        if stream:
            await resp.content.readany()
            first = time.perf_counter() - started
            await resp.read()
            return first
        await resp.read()
        return time.perf_counter() - started


async def _saturate(url: str, headers: dict, stream: bool, seconds: float, connections: int) -> tuple[int, int]:
    import aiohttp

    done, errors = 0, 0
    stop = time.perf_counter() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections)) as session:

        async def worker(w: int):
            nonlocal done, errors
            i = w * 1_000_000
            while time.perf_counter() < stop:
                i += 1
                try:
                    await _one(session, url, headers, i, stream)
                    done += 1
                except Exception:  # noqa: BLE001 - counted, reported
                    errors += 1

        await asyncio.gather(*(worker(w) for w in range(connections)))
    return done, errors


async def _interleaved(targets: list[tuple[str, dict]], stream: bool, rate: float, count: int) -> list[list[float]]:
    """Open loop at `rate` requests/s per target, the targets taking turns request by request: every column's
    latencies come from the same seconds, so the machine's drift (this VM's moves by a few tenths of a ms from one
    minute to the next) cancels out of "added"."""
    import aiohttp

    latencies: list[list[float]] = [[] for _ in targets]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256)) as session:
        for url, headers in targets:
            for i in range(10):  # warm the pools
                await _one(session, url, headers, i, stream)
        start = time.perf_counter()
        tasks = []
        for i in range(count * len(targets)):
            delay = start + i / (rate * len(targets)) - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            url, headers = targets[i % len(targets)]
            tasks.append((i % len(targets), asyncio.ensure_future(_one(session, url, headers, 10_000 + i, stream))))
        for column, task in tasks:
            try:
                latencies[column].append(await task)
            except Exception:  # noqa: BLE001 - a failed request has no latency
                pass
    return latencies


# ---- processes ----------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_http(url: str, timeout_s: float, proc: subprocess.Popen | None = None, headers: dict | None = None) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=1).read()
            return
        except urllib.error.HTTPError:
            return  # it answers
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up in {timeout_s:.0f}s")


def _spawn(args: list[str], core: int | None, env: dict | None = None, log: Path | None = None) -> subprocess.Popen:
    out = open(log, "wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(proc.pid, {core})
    return proc


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its children (LiteLLM forks workers)."""
    total = 0.0
    pids = [pid]
    try:
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError):
            pass
    return total


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ---- the columns ----------------------------------------------------------------------------------------------
def _saturation(name: str, url: str, headers: dict, proc: subprocess.Popen | None, args) -> dict:
    endpoint = url + "/v1/chat/completions"
    cpu0 = _cpu_s(proc.pid) if proc else 0.0
    done, errors = asyncio.run(_saturate(endpoint, headers, False, args.seconds, args.connections))
    cpu1 = _cpu_s(proc.pid) if proc else 0.0
    sdone, serrors = asyncio.run(_saturate(endpoint, headers, True, args.seconds / 2, args.connections))
    result = {
        "name": name,
        "rps": done / args.seconds,
        "streams_per_s": sdone / (args.seconds / 2),
        "errors": errors + serrors,
        "cpu_ms_per_req": (cpu1 - cpu0) * 1000 / done if proc and done else None,
        "rss_mib": _rss_mib(proc.pid) if proc else None,
    }
    print(f"  {name}: {result['rps']:.0f} req/s, errors {result['errors']}", file=sys.stderr)
    return result


def _latency(columns: list[tuple[dict, str, dict]], args, load: float = 0.5) -> None:
    """The low-load phase for `columns` (result, base URL, headers) together, interleaved; the first is the floor.
    "Low load": the fixed rate, or `load` times what the slowest column sustains (requests or streams) if that is
    lower."""
    sustained = [min(result["rps"], result["streams_per_s"]) for result, _, _ in columns if result["rps"]]
    rate = min([args.rate] + [load * r for r in sustained])
    targets = [(url + "/v1/chat/completions", headers) for _, url, headers in columns]
    plain = asyncio.run(_interleaved(targets, False, rate, args.count))
    streamed = asyncio.run(_interleaved(targets, True, rate, args.count))
    floor = (_pct(plain[0], 50), _pct(plain[0], 99), _pct(streamed[0], 50))
    for (result, _, _), lat, first in zip(columns, plain, streamed):
        result.update(
            {
                "latency_rate": rate,
                "p50_ms": _pct(lat, 50),
                "p99_ms": _pct(lat, 99),
                "ttfc_p50_ms": _pct(first, 50),
                "ttfc_p99_ms": _pct(first, 99),
            }
        )
        result["added_p50_ms"] = result["p50_ms"] - floor[0]
        result["added_p99_ms"] = result["p99_ms"] - floor[1]
        result["added_ttfc_ms"] = result["ttfc_p50_ms"] - floor[2]
        result["errors"] += 2 * args.count - len(lat) - len(first)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q / 100))] * 1000


def _gateway_config(
    tmp: Path, upstream: str, redis_url: str, tokenizer: str, overlap: bool = True, guardrails: bool = False
) -> Path:
    """One tenant ("bench", key API_KEY, no guardrails), or with `guardrails` one per GUARDRAIL_KEYS policy."""
    import yaml

    unlimited = {"rpm": 10_000_000, "input_tpm": 10**10, "output_tpm": 10**10, "max_concurrent": 100_000}
    if guardrails:
        tenants = [
            {"id": policy, "guardrails": policy, **unlimited, "keys": [{"name": policy, "key": key}]}
            for policy, key in GUARDRAIL_KEYS.items()
        ]
    else:
        tenants = [{"id": "bench", **unlimited, "keys": [{"name": "bench", "key": API_KEY}]}]
    seed = tmp / "tenants.yaml"
    seed.write_text(yaml.safe_dump({"tenants": tenants}))
    config = tmp / "gateway.yaml"
    settings = {
        "tenants_seed": str(seed),
        "redis": {"url": redis_url, "key_prefix": "sgbench:", "socket_timeout_s": 0.5},
        "models": {"bench": {"tokenizer": tokenizer, "replicas": [upstream]}},
        "admission_overlap": overlap,
    }
    if guardrails:
        settings["guardrails"] = {"policies": GUARDRAIL_POLICIES}
    config.write_text(yaml.safe_dump(settings))
    return config


def _install_litellm(log: Path) -> Path | None:
    python = LITELLM_VENV / "bin" / "python"
    if (
        python.exists()
        and subprocess.run([str(python), "-c", "import litellm.proxy.proxy_server"], capture_output=True).returncode
        == 0
    ):
        return python
    try:
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True, capture_output=True)
        with open(log, "wb") as out:
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", "litellm[proxy]", "redis"],
                check=True,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=900,
            )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
        return None
    return python


def _litellm_config(tmp: Path, upstream: str, redis_port: int) -> Path:
    import yaml

    config = tmp / "litellm.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model_list": [
                    {
                        "model_name": "bench",
                        "litellm_params": {
                            "model": "openai/bench",
                            "api_base": upstream + "/v1",
                            "api_key": "none",
                            "rpm": 10_000_000,
                            "tpm": 10**10,
                        },
                    }
                ],
                "router_settings": {
                    "routing_strategy": "usage-based-routing-v2",
                    "redis_host": "127.0.0.1",
                    "redis_port": redis_port,
                    "enable_pre_call_checks": True,
                },
                "general_settings": {"master_key": MASTER_KEY},
                "litellm_settings": {"drop_params": True, "set_verbose": False},
            }
        )
    )
    return config


def _start_cluster(tmp: Path, core: int, procs: list[subprocess.Popen]) -> str:
    """Three cluster-enabled redis-servers (no replicas), their slots split by redis-cli: the redis+cluster:// URL."""
    ports: list[int] = []
    while len(ports) < 3:  # each node's cluster bus listens on port + 10000
        port = _free_port()
        if port + 10000 < 65536 and port + 10000 not in ports:
            ports.append(port)
    for port in ports:
        folder = tmp / f"cluster-{port}"
        folder.mkdir()
        args = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(folder)]
        args += ["--cluster-enabled", "yes", "--cluster-config-file", str(folder / "nodes.conf")]
        procs.append(_spawn(args, core))
    addresses = [f"127.0.0.1:{port}" for port in ports]
    deadline = time.monotonic() + 30
    while subprocess.run(["redis-cli", "-p", str(ports[-1]), "ping"], capture_output=True).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster's redis-servers did not start")
        time.sleep(0.05)
    create = ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"]
    subprocess.run(create, check=True, capture_output=True, timeout=60)
    for port in ports:
        while (
            b"cluster_state:ok"
            not in subprocess.run(["redis-cli", "-p", str(port), "cluster", "info"], capture_output=True).stdout
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")
            time.sleep(0.05)
    return "redis+cluster://" + ",".join(addresses)


def _guardrail_columns(tmp: Path, upstream: str, redis_url: str, tokenizer: str, args) -> list[dict]:
    """sg-inject and sg-along: one gateway, a tenant per policy; their latencies taken in turns with a fresh direct
    floor."""
    folder = tmp / "sg-guardrails"
    folder.mkdir()
    config = _gateway_config(folder, upstream, redis_url, tokenizer, args.admission_overlap == "on", guardrails=True)
    port = _free_port()
    gw = _spawn(
        [sys.executable, "-m", "sluicegate.cli", "gateway", "--config", str(config), "--port", str(port)],
        0,
        log=tmp / "gateway-guardrails.log",
    )
    try:
        url = f"http://127.0.0.1:{port}"
        keys = {name: {"authorization": f"Bearer {key}"} for name, key in GUARDRAIL_KEYS.items()}
        _wait_http(url + "/v1/models", 120, gw, keys["sg-inject"])
        columns = [_saturation(name, url, auth, gw, args) for name, auth in keys.items()]
        floor = {"name": "direct", "rps": 0.0, "errors": 0}
        # Both columns load the one gateway: together a quarter of what it sustains, so queueing stays out of "added".
        targets = [(column, url, keys[column["name"]]) for column in columns]
        _latency([(floor, upstream, {}), *targets], args, load=0.25 / len(columns))
        return columns
    finally:
        _stop(gw)


def _table(results: list[dict]) -> str:
    rows = [
        ("RPS at saturation", "rps", "{:.0f}"),
        ("streams/s at saturation", "streams_per_s", "{:.0f}"),
        ("latency p50 ms", "p50_ms", "{:.2f}"),
        ("latency p99 ms", "p99_ms", "{:.2f}"),
        ("added p50 ms", "added_p50_ms", "{:+.2f}"),
        ("added p99 ms", "added_p99_ms", "{:+.2f}"),
        ("stream first chunk p50 ms", "ttfc_p50_ms", "{:.2f}"),
        ("first chunk added p50 ms", "added_ttfc_ms", "{:+.2f}"),
        ("latency phase rate req/s", "latency_rate", "{:.0f}"),
        ("gateway CPU ms / request", "cpu_ms_per_req", "{:.3f}"),
        ("gateway RSS MiB", "rss_mib", "{:.0f}"),
        ("errors", "errors", "{:d}"),
    ]
    width = 28
    lines = ["".ljust(width) + "".join(r["name"].rjust(13) for r in results)]
    for label, key, fmt in rows:
        cells = []
        for r in results:
            value = r.get(key)
            cells.append(("-" if value is None else fmt.format(value)).rjust(13))
        lines.append(label.ljust(width) + "".join(cells))
    return "\n".join(lines)


def run(args) -> dict:
    from engine.tiny_model import make_tiny_model  # builds the tokenizer folder offline; the gateway is torch-free

    tmp = Path(tempfile.mkdtemp(prefix="sg-bench-gateway-"))
    procs: list[subprocess.Popen] = []
    results: list[dict] = []
    notes: list[str] = []
    own_cores = os.sched_getaffinity(0)
    try:
        tokenizer = args.tokenizer or str(make_tiny_model(tmp / "tiny"))
        up_port, bare_port, gw_port, redis_port = (_free_port() for _ in range(4))
        upstream = f"http://127.0.0.1:{up_port}"
        load_cores = sorted(os.sched_getaffinity(0) - {0}) or [0]
        serve_upstream = ["--serve-upstream", str(up_port), "--upstream-ms", str(args.upstream_ms)]
        procs.append(_spawn([sys.executable, "-m", "bench.gateway", *serve_upstream], load_cores[0]))
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed; the benchmark runs its own")
        procs.append(
            _spawn(["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no"], load_cores[0])
        )
        os.sched_setaffinity(0, set(load_cores))
        _wait_http(upstream + "/v1/models", 20)
        direct = _saturation("direct", upstream, {}, None, args)

        bare = _spawn([sys.executable, "-m", "bench.gateway", "--serve-bare", str(bare_port), upstream], 0)
        procs.append(bare)
        bare_url = f"http://127.0.0.1:{bare_port}"
        _wait_http(bare_url + "/v1/chat/completions", 30, bare)
        bare_result = _saturation("bare", bare_url, {}, bare, args)

        config = _gateway_config(
            tmp, upstream, f"redis://127.0.0.1:{redis_port}/0", tokenizer, args.admission_overlap == "on"
        )
        gw = _spawn(
            [sys.executable, "-m", "sluicegate.cli", "gateway", "--config", str(config), "--port", str(gw_port)],
            0,
            log=tmp / "gateway.log",
        )
        procs.append(gw)
        auth = {"authorization": f"Bearer {API_KEY}"}
        gw_url = f"http://127.0.0.1:{gw_port}"
        _wait_http(gw_url + "/v1/models", 60, gw, auth)
        ours = _saturation("sluicegate", gw_url, auth, gw, args)
        # Both pass-throughs sit on core 0; taking turns at a low rate, one is idle while the other serves.
        _latency([(direct, upstream, {}), (bare_result, bare_url, {}), (ours, gw_url, auth)], args)
        results += [direct, bare_result, ours]
        _stop(bare)
        _stop(gw)

        if args.guardrails:
            results += _guardrail_columns(tmp, upstream, f"redis://127.0.0.1:{redis_port}/0", tokenizer, args)

        if args.redis_cluster:
            cluster_url = _start_cluster(tmp, load_cores[0], procs)
            cluster_dir = tmp / "sg-cluster"
            cluster_dir.mkdir()
            config = _gateway_config(cluster_dir, upstream, cluster_url, tokenizer, args.admission_overlap == "on")
            cl_port = _free_port()
            cl = _spawn(
                [sys.executable, "-m", "sluicegate.cli", "gateway", "--config", str(config), "--port", str(cl_port)],
                0,
                log=tmp / "gateway-cluster.log",
            )
            procs.append(cl)
            cl_url = f"http://127.0.0.1:{cl_port}"
            _wait_http(cl_url + "/v1/models", 60, cl, auth)
            on_cluster = _saturation("sg-cluster", cl_url, auth, cl, args)
            _latency([({"rps": 0.0, "errors": 0}, upstream, {}), (on_cluster, cl_url, auth)], args)
            on_cluster["rps_vs_single_node"] = on_cluster["rps"] / max(ours["rps"], 1e-9)
            results.append(on_cluster)
            _stop(cl)

        if args.skip_litellm:
            notes.append("litellm: skipped (--skip-litellm)")
        else:
            python = _install_litellm(tmp / "litellm-install.log")
            if python is None:
                notes.append(f"litellm: could not be installed into {LITELLM_VENV} (see {tmp}/litellm-install.log)")
            else:
                ll_port = _free_port()
                ll = _spawn(
                    [
                        str(python),
                        "-m",
                        "litellm.proxy.proxy_cli",
                        "--config",
                        str(_litellm_config(tmp, upstream, redis_port)),
                        "--port",
                        str(ll_port),
                        "--num_workers",
                        "1",
                    ],
                    0,
                    log=tmp / "litellm.log",
                )
                procs.append(ll)
                ll_auth = {"authorization": f"Bearer {MASTER_KEY}"}
                ll_url = f"http://127.0.0.1:{ll_port}"
                try:
                    _wait_http(ll_url + "/health/liveliness", 180, ll)
                    litellm = _saturation("litellm", ll_url, ll_auth, ll, args)
                    # its own floor: a fresh direct column taking turns with it, at the rate it sustains
                    _latency([({"rps": 0.0, "errors": 0}, upstream, {}), (litellm, ll_url, ll_auth)], args)
                    results.append(litellm)
                except RuntimeError as exc:
                    notes.append(f"litellm: did not run ({exc}); log in {tmp}/litellm.log")
                _stop(ll)
    finally:
        for proc in procs:
            _stop(proc)
        os.sched_setaffinity(0, own_cores)
    by_name = {r["name"]: r for r in results}
    if "litellm" in by_name and "sluicegate" in by_name:
        by_name["sluicegate"]["rps_vs_litellm"] = by_name["sluicegate"]["rps"] / max(by_name["litellm"]["rps"], 1e-9)
    shutil.rmtree(tmp, ignore_errors=True)
    return {
        "bench": "gateway",
        "seconds": args.seconds,
        "connections": args.connections,
        "rate": args.rate,
        "results": results,
        "notes": notes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sluicegate bench gateway", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--seconds", type=float, default=5.0, help="saturation phase length")
    parser.add_argument("--connections", type=int, default=64, help="closed-loop connections at saturation")
    parser.add_argument(
        "--rate", type=float, default=100.0, help="requests/s per column in the fixed-rate latency phase"
    )
    parser.add_argument("--count", type=int, default=1000, help="requests per column in the fixed-rate latency phase")
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument(
        "--redis-cluster",
        action="store_true",
        help="add a column: the gateway on a 3-master Redis Cluster of the benchmark's own (ratio to one node)",
    )
    parser.add_argument(
        "--admission-overlap",
        choices=("on", "off"),
        default="on",
        help="the gateway's admission_overlap setting (off: every request admitted before it is sent)",
    )
    parser.add_argument("--tokenizer", help="tokenizer folder to count with (default: a tiny model made offline)")
    parser.add_argument(
        "--guardrails",
        action="store_true",
        help="add two columns: the injection check (shipped encoder) before the upstream request, and alongside it",
    )
    parser.add_argument(
        "--upstream-ms", type=float, default=0.0, help="the fake upstream's time to first byte (default: none)"
    )
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-bare", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_upstream:
        _serve_upstream(args.serve_upstream, args.upstream_ms)
        return 0
    if args.serve_bare:
        _serve_bare(int(args.serve_bare[0]), args.serve_bare[1])
        return 0
    report = run(args)
    if args.json:
        print(json.dumps(report))
    else:
        print(_table(report["results"]))
        if "rps_vs_litellm" in report["results"][2 if len(report["results"]) > 2 else -1]:
            print(f"sluicegate / litellm RPS: {report['results'][2]['rps_vs_litellm']:.1f}x")
        for result in report["results"]:
            if "rps_vs_single_node" in result:
                print(f"sluicegate on a 3-master cluster / on one node, RPS: {result['rps_vs_single_node']:.2f}x")
        for note in report["notes"]:
            print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
