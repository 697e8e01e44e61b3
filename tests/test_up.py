"""`sluicegate up` end to end: real child processes (a gateway, two engine replicas, the tiny model made on first
run), a completion through the gateway with the printed key via the `openai` client, the lock against a second
`up`, and Ctrl-C leaving no process behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from sluicegate.up import REPLICA_KV_CACHE_BYTES, replica_args, write_gateway_files
from sluicegate.up_demo import DEMO_KEY_ENV, DEMO_TENANT, admin_token, demo_key

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
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", DEMO_KEY_ENV, "SLUICEGATE_ADMIN_TOKEN")}
    process = subprocess.Popen(
        up_command(state_dir), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("EOF") and any(other.rstrip().endswith("- <<'EOF'") for other in lines):
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
    assert server_config.tool_call_parser == "llama3_json"  # the tiny model's template writes Llama 3 tool calls


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


def test_tools_work_through_the_local_stack(stack):
    """An OpenAI client that passes tools (tool_choice 'auto' by default) gets an answer, and a forced call is a
    well-formed tool call: the replicas parse tool calls and the tiny model's template renders tools."""
    _, output, _ = stack
    base_url = re.search(r"^  gateway   (\S+)$", output, re.M).group(1)
    api_key = re.search(r"^  api key   (\S+)$", output, re.M).group(1)
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=60)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                # An enum keeps the forced call short: a free string from random weights may run past max_tokens.
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "enum": ["Rome", "Paris"]}},
                    "required": ["city"],
                },
            },
        }
    ]
    messages = [{"role": "user", "content": "Weather in Rome?"}]
    auto = client.chat.completions.create(model="tiny", messages=messages, tools=tools, max_tokens=8)
    assert auto.choices[0].finish_reason in ("stop", "length", "tool_calls")
    forced = client.chat.completions.create(
        model="tiny", messages=messages, tools=tools, tool_choice="required", max_tokens=64, temperature=0
    )
    call = forced.choices[0].message.tool_calls[0]
    assert forced.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] in ("Rome", "Paris")


def test_printed_admin_token_works_and_the_tenant_holds_only_the_demo_key(stack):
    _, output, state_dir = stack
    gateway = re.search(r"^  gateway   (\S+)/v1$", output, re.M).group(1)
    token = re.search(r"^  admin     (\S+)$", output, re.M).group(1)
    api_key = re.search(r"^  api key   (\S+)$", output, re.M).group(1)
    assert re.search(rf"^  tenant    {DEMO_TENANT}$", output, re.M) and "note" not in output
    assert api_key == (state_dir / "demo-key").read_text().strip()  # kept for the next run to reuse
    keys = httpx.get(f"{gateway}/admin/v1/tenants/{DEMO_TENANT}/keys", headers={"authorization": f"Bearer {token}"})
    assert keys.status_code == 200, keys.text
    assert [k["name"] for k in keys.json()["data"]] == ["sluicegate up demo key"]
    assert f"sluicegate admin --url {gateway} --token {token} tenants list" in output


def test_demo_key_is_kept_and_reused(tmp_path, monkeypatch):
    """With Redis the seed adds a key only when its digest is new: the same key every run means one key."""
    monkeypatch.delenv(DEMO_KEY_ENV, raising=False)
    first = demo_key(tmp_path)
    assert first.startswith("sk-sg-demo-") and demo_key(tmp_path) == first
    assert (tmp_path / "demo-key").stat().st_mode & 0o777 == 0o600
    (tmp_path / "tenants.yaml").write_text("left by an earlier run, world-readable")
    write_gateway_files(tmp_path, "127.0.0.1", 8000, tmp_path, ["http://127.0.0.1:9"], first, ["both"])
    seed = tmp_path / "tenants.yaml"
    assert first in seed.read_text() and seed.stat().st_mode & 0o777 == 0o600  # it holds the key too
    monkeypatch.setenv(DEMO_KEY_ENV, "sk-sg-given")
    assert demo_key(tmp_path) == "sk-sg-given"


def test_admin_token_is_made_unless_given():
    made, was_made = admin_token({})
    assert was_made and made.startswith("sk-admin-") and len(made) > 30 and admin_token({})[0] != made
    assert admin_token({"SLUICEGATE_ADMIN_TOKEN": "mine"}) == ("mine", False)


def test_printed_python_snippet_runs(stack):
    _, output, _ = stack
    head, rest = output.split(" - <<'EOF'\n", 1)
    python = head.splitlines()[-1]  # the interpreter the banner names: this environment's, activated or not
    assert python == sys.executable
    snippet = rest.split("\nEOF", 1)[0]
    result = subprocess.run([python, "-c", snippet], capture_output=True, text=True, timeout=60)
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


def test_disagg_prefills_on_one_replica_and_decodes_on_the_other(stack, tmp_path):
    """`sluicegate up --disagg`: a prompt of 256 tokens or more takes both hops; the decode replica reads its KV."""
    _, _, first_state_dir = stack
    shutil.copytree(first_state_dir / "models", tmp_path / "models")  # the tiny model, made once per module
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", DEMO_KEY_ENV, "SLUICEGATE_ADMIN_TOKEN")}
    command = [*up_command(tmp_path), "--disagg"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("EOF") or process.poll() is not None:
                break
        output = "".join(lines)
        urls = re.search(r"replicas: prefill (\S+), decode (\S+)", output)
        assert urls, output
        base_url = re.search(r"^  gateway   (\S+)$", output, re.M).group(1)
        api_key = re.search(r"^  api key   (\S+)$", output, re.M).group(1)
        prefill_url, decode_url = urls.groups()

        def metric(url: str, name: str) -> float:
            lines = httpx.get(url + "/metrics").text.splitlines()
            return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name + "{"))

        def diagnosis() -> str:  # why a handoff did not happen, should it not
            hops = [line for line in httpx.get(base_url.removesuffix("/v1") + "/metrics").text.splitlines()
                    if line.startswith("sluicegate_prefill_hops")]  # fmt: skip
            fallbacks = [line for line in httpx.get(decode_url + "/metrics").text.splitlines()
                         if line.startswith("sluicegate_engine_kv_pull_fallbacks")]  # fmt: skip
            logs = "\n".join(f"{p.name}: {p.read_text()[-1500:]}" for p in sorted((tmp_path / "logs").glob("*.log")))
            return "\n".join([*hops, *fallbacks, logs])

        # `up --disagg` checked a handoff before it printed its banner
        assert metric(decode_url, "sluicegate_engine_kv_blocks_read_total") > 0, diagnosis()
        handoffs_before = metric(prefill_url, "sluicegate_engine_kv_handoffs_total")
        blocks_read_before = metric(decode_url, "sluicegate_engine_kv_blocks_read_total")
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=60)
        prompt = "A prompt long enough for the prefill replica. " * 40
        answer = client.completions.create(model="tiny", prompt=prompt, max_tokens=8, temperature=0)
        assert answer.choices[0].text and answer.usage.prompt_tokens >= 256
        full_blocks = (answer.usage.prompt_tokens - 1) // 16
        # The decode replica took every full block as a prefix hit, but the prefill replica computed them (this prompt
        # is new to it): the client is shown, and billed, none as cached.
        assert answer.usage.prompt_tokens_details.cached_tokens == 0, diagnosis()
        assert metric(prefill_url, "sluicegate_engine_kv_handoffs_total") - handoffs_before == 1
        assert metric(decode_url, "sluicegate_engine_kv_blocks_read_total") - blocks_read_before == full_blocks
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0


def test_the_banners_admin_command_runs_in_a_shell(monkeypatch, tmp_path):
    """With the token taken from SLUICEGATE_ADMIN_TOKEN the banner printed `--token (SLUICEGATE_ADMIN_TOKEN)`, which
    bash refuses ("syntax error near unexpected token '('"); it names the variable for the shell to expand."""
    from sluicegate import up

    monkeypatch.setattr(up, "foreign_keys", lambda *args: [])
    stack = up.Stack(gateway_url="http://127.0.0.1:8000", api_key="sk-x", admin_token="secret", admin_token_made=False)
    line = next(x for x in up.banner(stack, tmp_path).splitlines() if "sluicegate admin" in x)
    command = line[line.index("sluicegate admin") :]
    assert "secret" not in command
    shown = subprocess.run(
        ["bash", "-c", f'set -- {command}; echo "$6"'],
        env={"SLUICEGATE_ADMIN_TOKEN": "from-env", "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == "from-env"
