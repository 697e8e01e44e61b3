"""Engine crash and SIGTERM drain on real servers: no silent hang, no lost request."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading

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


def test_drain_finishes_in_flight_and_refuses_new_work(tiny_model_dir):
    """What SIGTERM's handler does, called directly (signals reach only the main thread; the subprocess test below
    sends a real one)."""
    server = LiveServer(make_engine(tiny_model_dir)).start()
    try:
        body = {**STREAM_BODY, "max_tokens": 60}
        with httpx.Client(base_url=server.url, timeout=60) as client:
            with client.stream("POST", "/v1/completions", json=body) as streaming:
                lines = streaming.iter_lines()
                next(line for line in lines if '"text"' in line)
                server.server.handle_exit(signal.SIGTERM, None)
                wait_until(lambda: server.replica.draining, what="draining")
                rest = [line for line in lines if line]
        assert rest[-1] == "data: [DONE]" and any('"finish_reason":"length"' in line for line in rest)
        server.thread.join(60)
        assert not server.thread.is_alive() and server.exit_code == 0
        assert not server.replica.engine.alive  # the engine thread stopped with the app
    finally:
        server.stop()


def test_draining_replica_answers_503_and_fails_health(tiny_model_dir):
    server = LiveServer(make_engine(tiny_model_dir, max_model_len=64)).start()
    try:
        # Before draining: without max_tokens a completion may run up to the context length.
        body = {"prompt": list(range(10, 20)), "ignore_eos": True}
        response = server.http.post("/v1/completions", json=body).json()
        assert response["usage"]["completion_tokens"] == 54 and response["choices"][0]["finish_reason"] == "length"

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


def test_sigterm_drains_in_flight_requests_then_exits_zero(tiny_model_dir):
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "sluicegate.cli", "engine", "--model", tiny_model_dir, "--port", str(port)]
    command += ["--num-kv-blocks", "256", "--drain-timeout-s", "60", "--log-level", "warning"]
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
        body = {**STREAM_BODY, "max_tokens": 100}
        with client.stream("POST", "/v1/completions", json=body) as streaming:
            lines = streaming.iter_lines()
            next(line for line in lines if '"text"' in line)
            proc.send_signal(signal.SIGTERM)
            rest = [line for line in lines if line]
        assert rest[-1] == "data: [DONE]" and any('"finish_reason":"length"' in line for line in rest)
        assert proc.wait(60) == 0
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
