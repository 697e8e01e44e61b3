"""`sluicegate up` end to end: real child processes (a gateway, two engine replicas, the tiny model made on first
run), a completion through the gateway with the printed key via the `openai` client, the lock against a second
`up`, and Ctrl-C leaving no process behind."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from sluicegate.up import REPLICA_KV_CACHE_BYTES, replica_args

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def up_command(state_dir: Path) -> list[str]:
    return [sys.executable, "-m", "sluicegate.cli", "up", "--port", "0", "--state-dir", str(state_dir)]


def descendants(pid: int) -> set[int]:
    """Every live process below `pid`, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("up-state")
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "SLUICEGATE_DEMO_KEY")}
    process = subprocess.Popen(up_command(state_dir), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("EOF") and any(l.startswith("python - <<") for l in lines):
            break
    output = "".join(lines)
    if process.poll() is not None or "api key" not in output:
        process.kill()
        logs = "\n".join(p.read_text()[-2000:] for p in (state_dir / "logs").glob("*.log"))
        pytest.fail(f"sluicegate up did not start:\n{output}\n{process.stdout.read()}\n{logs}")
    yield process, output, state_dir
    if process.poll() is None:
        process.kill()
        process.wait()


def test_replica_flags_are_the_engine_clis_own(tmp_path):
    from engine.server.cli import _parser, build_configs

    engine_config, server_config = build_configs(_parser().parse_args(replica_args(tmp_path, 8123)))
    assert (engine_config.device, engine_config.kv_cache_memory_bytes) == ("cpu", REPLICA_KV_CACHE_BYTES)
    assert (server_config.port, server_config.host) == (8123, "127.0.0.1")


def test_port_in_use_is_an_error_before_anything_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = up_command(tmp_path)
        command[command.index("--port") + 1] = str(port)
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "--port" in result.stderr
    assert not (tmp_path / "models").exists()


def test_tiny_model_is_made_on_first_run(stack):
    _, output, state_dir = stack
    assert "making the tiny model" in output
    assert (state_dir / "models" / "tiny" / "config.json").is_file()


def test_printed_key_serves_a_completion_through_the_gateway(stack):
    _, output, _ = stack
    base_url = re.search(r"^  gateway   (\S+)$", output, re.M).group(1)
    api_key = re.search(r"^  api key   (\S+)$", output, re.M).group(1)
    assert "in-process" in output
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=60)
    completion = client.completions.create(model="tiny", prompt="def add(a, b):", max_tokens=8, temperature=0)
    assert completion.usage.completion_tokens == 8 and completion.choices[0].text
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base_url, api_key="sk-sg-wrong", max_retries=0).models.list()


def test_printed_python_snippet_runs(stack):
    _, output, _ = stack
    snippet = output.split("python - <<'EOF'\n", 1)[1].split("\nEOF", 1)[0]
    result = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() != ""


def test_second_up_says_one_is_running(stack):
    process, _, state_dir = stack
    result = subprocess.run(up_command(state_dir), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"already running (pid {process.pid}" in result.stderr


def test_ctrl_c_stops_everything_with_no_orphans(stack):
    process, _, state_dir = stack
    children = descendants(process.pid)
    assert len(children) >= 3  # the gateway and two replicas (and whatever they spawned)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0
    assert "stopped." in process.stdout.read()
    assert not [pid for pid in children if alive(pid)]
    assert (state_dir / "up.lock").read_text() == ""
