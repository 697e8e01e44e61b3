"""`sluicegate up`: the local stack in one command: a gateway and two engine replicas as child processes
(`--disagg`: one prefill and one decode replica, the prompt's KV moving between them over NIXL).

    .sluicegate/
      up.lock            held (flock) while a stack runs; holds its pid and gateway URL, so a second `up` says so
      models/tiny/       the tiny offline model, made on first run
      gateway.yaml       the generated gateway config (replicas on free loopback ports)
      tenants.yaml       the demo tenant and its key, seeded into the gateway at start (mode 0600)
      demo-key           the demo API key (mode 0600), reused by every run: with Redis, one key, not one per run
      logs/*.log         each child's output

Quotas live in the gateway's in-process store unless REDIS_URL is set. The banner prints the admin API's token
(made for the run unless SLUICEGATE_ADMIN_TOKEN is set). Ctrl-C (or SIGTERM) stops the gateway
first, then the replicas together, each with SIGTERM and a bounded wait before SIGKILL. Children run in their own session
(a terminal's Ctrl-C reaches only this supervisor, which stops them in order) and get SIGTERM from the kernel if
the supervisor dies without cleaning up, so no replica outlives it.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import yaml

from sluicegate.up_demo import DEMO_TENANT, admin_token, demo_key, foreign_keys, write_private

MODEL_NAME = "tiny"
NUM_REPLICAS = 2
STOP_TIMEOUT_S = 15.0
# Tiny model, fp32 on CPU: 512 bytes of KV per token, so 64 MiB holds 131k tokens per replica.
REPLICA_KV_CACHE_BYTES = 64 << 20
KV_NOTE = "\n            prompts of 256 tokens or more are prefilled on the first and decoded on the second"
# `--disagg`'s start-up check: 8 of these are some 330 tokens of the tiny model, past the gateway's 256.
HANDOFF_CHECK_TEXT = "The prefill replica computes this prompt and the decode replica reads its KV. "
HANDOFF_CHECK_INTERVAL_S = 0.5
KV_BLOCKS_READ_METRIC = "sluicegate_engine_kv_blocks_read_total"


class UpError(Exception):
    """The stack cannot start; the message says why and what to do."""


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    health_url: str


@dataclass
class Stack:
    """Filled in as it starts, so that whatever has started is stopped if a later step fails."""

    gateway_url: str = ""
    api_key: str = ""
    admin_token: str = ""
    admin_token_made: bool = False
    """Made for this run (printed), rather than given in SLUICEGATE_ADMIN_TOKEN (not echoed)."""
    children: list[Child] = field(default_factory=list)


def _kill_with_parent() -> None:
    """preexec_fn: the kernel sends SIGTERM to the child when the supervisor dies, even by SIGKILL (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def check_port_free(host: str, port: int) -> None:
    """Fail before starting anything rather than after the replicas have loaded."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise UpError(
                f"cannot listen on {host}:{port} ({exc.strerror}); pass --port N (0 picks a free port)"
            ) from None


class StackLock:
    """An exclusive flock on state_dir/up.lock: released by the kernel however this process ends."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "up.lock"
        self._file: TextIO | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # the holder wrote its pid right after taking the lock
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            info = json.loads(holder) if holder.startswith("{") else {}
            raise UpError(
                f"already running (pid {info.get('pid', '?')}, gateway {info.get('gateway_url', '?')});"
                f" stop it with Ctrl-C in its terminal or `kill {info.get('pid', '<pid>')}`"
            ) from None
        self._file = handle
        self.record("starting")

    def record(self, gateway_url: str) -> None:
        assert self._file is not None  # acquire() came first
        self._file.seek(0)
        self._file.truncate()
        self._file.write(json.dumps({"pid": os.getpid(), "gateway_url": gateway_url}))
        self._file.flush()

    def release(self) -> None:
        if self._file is not None:
            self._file.seek(0)
            self._file.truncate()
            self._file.close()
            self._file = None


def ensure_model(model_dir: Path, log_dir: Path) -> None:
    """Written to a side folder and renamed when complete, so an interrupted first run never leaves half a model."""
    if model_dir.is_dir():
        return
    print(f"making the tiny model in {model_dir} (first run only) ...", flush=True)
    partial_dir = model_dir.with_name(model_dir.name + ".partial")
    shutil.rmtree(partial_dir, ignore_errors=True)
    log_path = log_dir / "make-tiny-model.log"
    with open(log_path, "wb") as log:
        # Its own session, like the other children: a Ctrl-C now stops the stack once the model is written.
        result = subprocess.run(
            _sluicegate("make-tiny-model", str(partial_dir)),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_kill_with_parent,
        )
    if result.returncode != 0:
        raise UpError(f"making the tiny model failed; see {log_path}")
    partial_dir.rename(model_dir)


def _sluicegate(*args: str) -> list[str]:
    return [sys.executable, "-m", "sluicegate.cli", *args]


# The banner's commands run as printed from any shell, the environment activated or not: this one's executables.
_SCRIPT = Path(sys.executable).with_name("sluicegate")
_SLUICEGATE = str(_SCRIPT) if _SCRIPT.is_file() else "sluicegate"


def write_gateway_files(
    state_dir: Path, host: str, port: int, model_dir: Path, replica_urls: list[str], api_key: str, roles: list[str]
) -> Path:
    """The gateway config and the demo tenant's seed (see docs/operations.md for every field)."""
    seed_path = state_dir / "tenants.yaml"
    seed = {
        "tenants": [
            {
                "id": DEMO_TENANT,
                "rpm": 600,
                "input_tpm": 200_000,
                "output_tpm": 100_000,
                "max_concurrent": 16,
                "models": [MODEL_NAME],
                "keys": [{"key": api_key, "name": "sluicegate up demo key"}],
            }
        ]
    }
    write_private(seed_path, yaml.safe_dump(seed, sort_keys=False))  # it holds the demo key
    config_path = state_dir / "gateway.yaml"
    config = {
        "host": host,
        "port": port,
        "drain_timeout_s": 10,  # Ctrl-C: within STOP_TIMEOUT_S, before `up` kills what still runs
        "tenants_seed": str(seed_path),
        "redis": {"url_env": "REDIS_URL"},
        "router": "gateway.routing.factory:build_router",  # prefix-affinity routing on the replicas' KV events
        "models": {
            MODEL_NAME: {
                "tokenizer": str(model_dir),
                "replicas": [
                    {"name": f"engine-{i}", "url": url, "role": role}
                    for i, (url, role) in enumerate(zip(replica_urls, roles))
                ],
                "block_size": 16,
            }
        },
    }
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return config_path


def start_child(name: str, argv: list[str], log_dir: Path, health_url: str, env: dict[str, str]) -> Child:
    log_path = log_dir / f"{name}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=_kill_with_parent,
        )
    return Child(name, process, log_path, health_url)


def wait_healthy(children: list[Child], timeout_s: float, stop: threading.Event) -> None:
    deadline = time.monotonic() + timeout_s
    pending = list(children)
    while pending:
        for child in list(pending):
            if child.process.poll() is not None:
                raise UpError(
                    f"{child.name} exited with status {child.process.returncode} while starting:\n"
                    f"{_tail(child.log_path)}"
                )
            if _answers(child.health_url):
                pending.remove(child)
        if stop.is_set():
            raise KeyboardInterrupt
        if pending and time.monotonic() > deadline:
            names = ", ".join(c.name for c in pending)
            raise UpError(f"{names} not healthy after {timeout_s:.0f}s; logs: {pending[0].log_path.parent}")
        if pending:
            stop.wait(0.25)


def _complete(stack: Stack, prompt: str) -> None:
    """One completion of a token through the gateway, as the demo tenant (an HTTP error raises)."""
    body = json.dumps({"model": MODEL_NAME, "prompt": prompt, "max_tokens": 1}).encode()
    request = urllib.request.Request(
        f"{stack.gateway_url}/v1/completions",
        data=body,
        headers={"Authorization": f"Bearer {stack.api_key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


def wait_routable(stack: Stack, timeout_s: float, stop: threading.Event) -> None:
    """The gateway's /health does not say whether its router has seen a healthy replica yet (its probes run every
    few seconds): one real completion through it, retried while it answers 503, proves the whole path works."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _complete(stack, "ready?")
            return
        except urllib.error.HTTPError as exc:
            if exc.code != 503:
                raise UpError(
                    f"a first request through the gateway failed: HTTP {exc.code} {exc.read()[:300]!r}"
                ) from None
        except (urllib.error.URLError, OSError):
            pass
        if stop.is_set():
            raise KeyboardInterrupt
        if time.monotonic() > deadline:
            logs = stack.children[0].log_path.parent
            raise UpError(f"the gateway found no healthy replica within {timeout_s:.0f}s; logs: {logs}")
        stop.wait(0.25)


def check_handoff(stack: Stack, decode_url: str, timeout_s: float, stop: threading.Event) -> None:
    """`--disagg`: prompts long enough for the prefill replica until the decode replica has read one's KV (its
    `sluicegate_engine_kv_blocks_read_total` says so). Until the gateway's probes have seen the decode replica, a
    decode hop goes to the prefill replica (served whole), so one try is not enough. It also makes the two replicas'
    first contact (the decode replica fetches the prefill replica's NIXL metadata and UCX connects them), which a
    user's first request would otherwise wait for. Each try has a prompt of its own (a repeated one would be found in
    a replica's own prefix cache)."""
    deadline = time.monotonic() + timeout_s
    attempt = 0
    while True:
        try:
            _complete(stack, f"Check {attempt}: {HANDOFF_CHECK_TEXT * 8}")
        except (urllib.error.URLError, OSError):
            pass
        if _kv_blocks_read(decode_url) > 0:
            return
        if stop.is_set():
            raise KeyboardInterrupt
        if time.monotonic() > deadline:
            logs = stack.children[0].log_path.parent
            raise UpError(
                f"the decode replica read no prompt's KV from the prefill replica in {timeout_s:.0f}s; logs: {logs}"
            )
        attempt += 1
        stop.wait(HANDOFF_CHECK_INTERVAL_S)


def _kv_blocks_read(replica_url: str) -> float:
    try:
        with urllib.request.urlopen(f"{replica_url}/metrics", timeout=5) as response:
            lines = response.read().decode().splitlines()
    except (urllib.error.URLError, OSError):
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(KV_BLOCKS_READ_METRIC + "{"))


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            ok: bool = response.status == 200
            return ok
    except (urllib.error.URLError, OSError):
        return False


def _tail(path: Path, num_lines: int = 20) -> str:
    lines = path.read_text(errors="replace").splitlines()[-num_lines:]
    return "\n".join(f"    {line}" for line in lines)


def stop_children(children: list[Child]) -> None:
    """The gateway first, so nothing new reaches a replica; then every replica at once (each drains on SIGTERM)."""
    _terminate([c for c in children if c.name == "gateway"])
    _terminate([c for c in children if c.name != "gateway"])


def _terminate(group: list[Child]) -> None:
    """SIGTERM to the group, then SIGKILL to whatever still runs STOP_TIMEOUT_S later."""
    for child in group:
        if child.process.poll() is None:
            child.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for child in group:
        try:
            child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()


def replica_roles(disagg: bool) -> list[str]:
    return ["prefill", "decode"] if disagg else ["both"] * NUM_REPLICAS


def replica_args(model_dir: Path, port: int, role: str = "both") -> list[str]:
    """`sluicegate engine` flags of one replica: CPU, a share of the cores (the replicas and the gateway run side
    by side), a small KV pool, a short drain so Ctrl-C is quick, tool calling; its part in disaggregated serving."""
    threads = max(1, (os.cpu_count() or 1) // NUM_REPLICAS)
    return [
        "--kv-role",
        role,
        "--model",
        str(model_dir),
        "--port",
        str(port),
        "--device",
        "cpu",
        "--cpu-threads",
        str(threads),
        "--kv-cache-memory-bytes",
        str(REPLICA_KV_CACHE_BYTES),
        "--drain-timeout-s",
        "5",
        "--log-level",
        "warning",
        "--tool-call-parser",
        "llama3_json",  # the tiny model's chat template writes tool calls in Llama 3's JSON
    ]


def start_stack(args: argparse.Namespace, state_dir: Path, stop: threading.Event, stack: Stack) -> None:
    gateway_port = args.port or free_port(args.host)
    check_port_free(args.host, gateway_port)
    log_dir = state_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    model_dir = state_dir / "models" / MODEL_NAME
    ensure_model(model_dir, log_dir)

    client_host = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
    stack.gateway_url = gateway_url = f"http://{client_host}:{gateway_port}"
    stack.api_key = api_key = demo_key(state_dir)
    stack.admin_token, stack.admin_token_made = admin_token(dict(os.environ))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "SLUICEGATE_ADMIN_TOKEN": stack.admin_token}

    replica_urls = []
    roles = replica_roles(args.disagg)
    for i, role in enumerate(roles):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        argv = _sluicegate("engine", *replica_args(model_dir, port, role))
        stack.children.append(start_child(f"engine-{i}", argv, log_dir, f"{url}/health", env))
        replica_urls.append(url)
    config_path = write_gateway_files(state_dir, args.host, gateway_port, model_dir, replica_urls, api_key, roles)
    gateway = start_child(
        "gateway", _sluicegate("gateway", "--config", str(config_path)), log_dir, f"{gateway_url}/health", env
    )
    stack.children.insert(0, gateway)
    started_s = time.monotonic()
    wait_healthy(stack.children, args.startup_timeout_s, stop)
    wait_routable(stack, args.startup_timeout_s - (time.monotonic() - started_s), stop)
    if args.disagg:
        decode_url = stack.children[1 + roles.index("decode")].health_url.removesuffix("/health")
        check_handoff(stack, decode_url, args.startup_timeout_s - (time.monotonic() - started_s), stop)


def banner(stack: Stack, state_dir: Path, disagg: bool = False) -> str:
    base_url = f"{stack.gateway_url}/v1"
    # The URL may carry a password: say where the setting comes from, not what it is.
    store = "Redis (REDIS_URL)" if os.environ.get("REDIS_URL") else "in-process (set REDIS_URL for Redis)"
    urls = [c.health_url.removesuffix("/health") for c in stack.children if c.name.startswith("engine")]
    labels = [f"{role} {url}" for role, url in zip(replica_roles(True), urls)] if disagg else urls
    replicas = ", ".join(labels)
    body = json.dumps({"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 32})
    # A token from the environment is not printed: the command reads it from there, as pasted into a shell.
    admin = stack.admin_token if stack.admin_token_made else '"$SLUICEGATE_ADMIN_TOKEN"'
    others = foreign_keys(stack.gateway_url, stack.admin_token, stack.api_key)
    # A shared Redis may hold the tenant from elsewhere: say so rather than mix in silently.
    note = f"\n  note      tenant {DEMO_TENANT} also holds keys not made here: {', '.join(others)}" if others else ""
    return f"""
Sluicegate is up. Ctrl-C stops it.
  gateway   {base_url}
  model     {MODEL_NAME} on {NUM_REPLICAS} replicas: {replicas}{KV_NOTE if disagg else ""}
  quotas    {store}
  tenant    {DEMO_TENANT}
  api key   {stack.api_key}
  admin     {admin}
  logs      {state_dir / "logs"}{note}

{_SLUICEGATE} admin --url {stack.gateway_url} --token {admin} tenants list

curl {base_url}/chat/completions \\
  -H "Authorization: Bearer {stack.api_key}" -H "Content-Type: application/json" \\
  -d '{body}'

{sys.executable} - <<'EOF'
from openai import OpenAI
client = OpenAI(base_url="{base_url}", api_key="{stack.api_key}")
messages = [{{"role": "user", "content": "Hello!"}}]
reply = client.chat.completions.create(model="{MODEL_NAME}", messages=messages, max_tokens=32)
print(reply.choices[0].message.content)
EOF
"""


def supervise(stack: Stack, stop: threading.Event) -> int:
    """Until Ctrl-C/SIGTERM (0) or a child dying on its own (1)."""
    while not stop.wait(0.5):
        for child in stack.children:
            if child.process.poll() is not None:
                print(
                    f"\n{child.name} exited with status {child.process.returncode}; stopping the stack.\n"
                    f"{_tail(child.log_path)}",
                    file=sys.stderr,
                    flush=True,
                )
                return 1
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sluicegate up", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="gateway address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="gateway port (default 8000; 0 picks a free one)")
    parser.add_argument(
        "--state-dir", default=".sluicegate", help="lock, models, configs and logs (default .sluicegate)"
    )
    parser.add_argument(
        "--disagg",
        action="store_true",
        help="one prefill and one decode replica (KV blocks over NIXL) instead of two that do both",
    )
    parser.add_argument(
        "--startup-timeout-s",
        type=float,
        default=180.0,
        help="wait this long for every process to be healthy (default 180)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    state_dir = Path(args.state_dir).resolve()
    lock = StackLock(state_dir)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    stack = Stack()
    try:
        lock.acquire()
        start_stack(args, state_dir, stop, stack)
        lock.record(stack.gateway_url)
        print(banner(stack, state_dir, args.disagg), flush=True)
        status = supervise(stack, stop)
    except UpError as exc:
        print(f"sluicegate up: {exc}", file=sys.stderr, flush=True)
        status = 1
    except KeyboardInterrupt:
        status = 0
    finally:
        if stack.children:
            print("stopping ...", flush=True)
            stop_children(stack.children)
        lock.release()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stack.children:
        print("stopped.", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
