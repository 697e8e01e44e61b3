"""Engine crash and SIGTERM drain on real servers: no silent hang, no lost request."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx

from tests.engine.server.live import LiveServer, make_engine, wait_until

STREAM_BODY = {"prompt": "while True:", "max_tokens": 3000, "stream": True, "ignore_eos": True}


def _inject_crash(llm_engine) -> threading.Event:
    """After the event is set, the engine's next step raises (as a CUDA error or a bug would)."""
    crash, real_step = threading.Event(), llm_engine.step

    def step():
        if crash.is_set():
            raise RuntimeError("injected engine failure")
        return real_step()

    llm_engine.step = step
    return crash


def test_crash_fails_health_and_every_waiting_request(tiny_model_dir):
    llm_engine = make_engine(tiny_model_dir)
    fatal: list[BaseException] = []
    server = LiveServer(llm_engine, on_fatal=fatal.append).start()
    crash = _inject_crash(llm_engine)
    try:
        whole: dict = {}
        with httpx.stream("POST", server.url + "/v1/completions", json=STREAM_BODY, timeout=60) as streaming:
            lines = streaming.iter_lines()
            next(line for line in lines if '"text"' in line)
            body = {**STREAM_BODY, "stream": False}
            waiter = threading.Thread(
                target=lambda: whole.update(response=httpx.post(server.url + "/v1/completions", json=body, timeout=60))
            )
            waiter.start()
            wait_until(lambda: server.replica.metrics.stats.num_running == 2, what="both requests running")
            crash.set()
            rest = [line for line in lines if line]
        waiter.join(60)
        assert any('"engine_dead"' in line for line in rest) and rest[-1] == "data: [DONE]"
        assert whole["response"].status_code == 503 and whole["response"].json()["error"]["code"] == "engine_dead"
        health = httpx.get(server.url + "/health")
        assert health.status_code == 503 and health.json() == {"status": "dead"}
        refused = httpx.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1})
        assert refused.status_code == 503
        assert len(fatal) == 1 and "injected" in str(fatal[0])
    finally:
        server.stop()


def test_crash_makes_the_server_exit_non_zero(tiny_model_dir):
    llm_engine = make_engine(tiny_model_dir)
    server = LiveServer(llm_engine).start()  # the CLI's ReplicaServer
    _inject_crash(llm_engine).set()
    try:
        response = httpx.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=60)
        assert response.status_code == 503
        server.thread.join(60)
        assert not server.thread.is_alive() and server.exit_code == 1
    finally:
        server.stop()


def _gate_steps(llm_engine, step_delay_s: float = 0.0) -> threading.Event:
    """The engine thread steps only while the returned event is set (it starts set), each step `step_delay_s` late:
    a test holds requests in flight as long as it needs."""
    go, real_step = threading.Event(), llm_engine.step
    go.set()

    def step():
        go.wait(60)
        time.sleep(step_delay_s)
        return real_step()

    llm_engine.step = step
    return go


# uvicorn looks at should_exit every 0.1 s: a listener wrongly closed on the signal is closed after this.
LISTENER_CLOSE_S = 0.3


def test_drain_keeps_listening_with_503s_and_finishes_in_flight_work(tiny_model_dir):
    """What SIGTERM's handler does, called directly (signals reach only the main thread; the subprocess test below
    sends a real one)."""
    llm_engine = make_engine(tiny_model_dir)
    server = LiveServer(llm_engine).start()
    steps = _gate_steps(llm_engine)
    try:
        body = {**STREAM_BODY, "max_tokens": 60}
        with (
            httpx.Client(base_url=server.url, timeout=60) as client,
            client.stream("POST", "/v1/completions", json=body) as streaming,
        ):
            lines = streaming.iter_lines()
            next(line for line in lines if '"text"' in line)
            steps.clear()  # the stream stays in flight while the drain is looked at
            server.server.handle_exit(signal.SIGTERM, None)
            wait_until(lambda: server.replica.draining, what="draining")
            time.sleep(LISTENER_CLOSE_S)
            health = client.get("/health")
            assert health.status_code == 503 and health.json() == {"status": "draining"}
            refused = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "overloaded"
            steps.set()
            rest = [line for line in lines if line]
        assert rest[-1] == "data: [DONE]" and any('"finish_reason":"length"' in line for line in rest)
        server.thread.join(60)
        assert not server.thread.is_alive() and server.exit_code == 0
        assert not server.replica.engine.alive  # the engine thread stopped with the app
    finally:
        steps.set()
        server.stop()


def test_drain_timeout_ends_open_requests_with_an_error_and_exits_zero(tiny_model_dir):
    llm_engine = make_engine(tiny_model_dir)
    server = LiveServer(llm_engine, drain_timeout_s=0.5).start()
    _gate_steps(llm_engine, step_delay_s=0.01)  # 3000 tokens take 30 s or more: far past the drain timeout
    try:
        whole: dict = {}
        with httpx.Client(base_url=server.url, timeout=60) as client:
            with client.stream("POST", "/v1/completions", json=STREAM_BODY) as streaming:
                lines = streaming.iter_lines()
                next(line for line in lines if '"text"' in line)
                body = {**STREAM_BODY, "stream": False}
                waiter = threading.Thread(
                    target=lambda: whole.update(response=client.post("/v1/completions", json=body))
                )
                waiter.start()
                wait_until(lambda: server.replica.metrics.stats.num_running == 2, what="both requests running")
                server.server.handle_exit(signal.SIGTERM, None)
                rest = [line for line in lines if line]
            waiter.join(60)
        assert rest[-1] == "data: [DONE]" and not any('"finish_reason":"length"' in line for line in rest)
        error = json.loads(rest[-2].removeprefix("data: "))["error"]
        assert error["code"] == "overloaded" and "drain timeout" in error["message"]
        response = whole["response"]
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert "drain timeout" in response.json()["error"]["message"]
        server.thread.join(60)
        assert not server.thread.is_alive() and server.exit_code == 0
    finally:
        server.stop()


def test_draining_replica_answers_503_and_fails_health(tiny_model_dir):
    server = LiveServer(make_engine(tiny_model_dir)).start()
    try:
        server.server._loop.call_soon_threadsafe(server.replica.begin_drain)
        wait_until(lambda: server.replica.draining, what="draining")
        health = httpx.get(server.url + "/health")
        assert health.status_code == 503 and health.json() == {"status": "draining"}
        response = httpx.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1})
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert httpx.get(server.url + "/v1/kv/events").status_code == 503
    finally:
        server.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_sigterm_drains_answering_503_then_ends_what_is_left_and_exits_zero(tiny_model_dir):
    """A real SIGTERM: the short stream finishes within the drain, the long one is ended at the timeout."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "sluicegate.cli", "engine", "--model", tiny_model_dir, "--port", str(port)]
    command += ["--num-kv-blocks", "256", "--drain-timeout-s", "2", "--log-level", "warning"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    client = httpx.Client(base_url=url, timeout=120)
    try:

        def healthy() -> bool:
            assert proc.poll() is None, proc.stdout.read().decode()
            try:
                return client.get("/health").status_code == 200
            except httpx.TransportError:
                return False

        wait_until(healthy, timeout_s=180, interval_s=0.2, what="replica up")
        short, long = {**STREAM_BODY, "max_tokens": 100}, {**STREAM_BODY, "max_tokens": 4000}  # 4000: seconds
        with client.stream("POST", "/v1/completions", json=long) as long_stream:
            long_lines = long_stream.iter_lines()
            next(line for line in long_lines if '"text"' in line)
            with client.stream("POST", "/v1/completions", json=short) as short_stream:
                short_lines = short_stream.iter_lines()
                next(line for line in short_lines if '"text"' in line)
                proc.send_signal(signal.SIGTERM)
                time.sleep(LISTENER_CLOSE_S)
                assert client.get("/health").status_code == 503
                refused = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
                assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
                short_rest = [line for line in short_lines if line]
            long_rest = [line for line in long_lines if line]
        assert short_rest[-1] == "data: [DONE]" and any('"finish_reason":"length"' in line for line in short_rest)
        assert long_rest[-1] == "data: [DONE]" and "drain timeout" in long_rest[-2]
        assert proc.wait(60) == 0
        assert "Traceback" not in proc.stdout.read().decode()
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_port_zero_is_named_once_bound(tiny_model_dir):
    """`--port 0` takes a free port, and the replica's log names the one it got (it once said port 0)."""
    command = [sys.executable, "-m", "sluicegate.cli", "engine", "--model", tiny_model_dir, "--port", "0"]
    command += ["--num-kv-blocks", "64"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watchdog = threading.Timer(180, proc.kill)  # a replica that never says where it serves fails, not hangs
    watchdog.start()
    try:
        said = next((line for line in proc.stdout if " serving " in line), "")
        url = said.rsplit(" on ", 1)[-1].strip()
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0"), said
        assert httpx.get(url + "/health", timeout=30).status_code == 200
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
        proc.stdout.close()
