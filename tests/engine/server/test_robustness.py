"""Malformed and hostile input, disconnects, and backpressure against a real server: never a 500, never a hang."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest

from tests.engine.server.live import LiveServer, make_engine, wait_until

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def _post(server, path: str, content: bytes | str) -> httpx.Response:
    return server.http.post(path, content=content, headers={"content-type": "application/json"})


def _assert_openai_error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


@pytest.mark.parametrize(
    "path, body, param",
    [
        (COMPLETIONS, b"{not json", None),
        (COMPLETIONS, b'{"prompt": "\xff\xfe bad utf-8"}', None),
        (COMPLETIONS, b'{"prompt": "lone \\ud800 surrogate"}', "prompt"),
        (COMPLETIONS, b'{"prompt": "x", "max_tokens": "ten"}', "max_tokens"),
        (COMPLETIONS, b'{"prompt": "x", "temperature": NaN}', None),
        (COMPLETIONS, b'{"prompt": {"nested": [1]}}', "prompt"),
        (COMPLETIONS, b'{"prompt": [-1, 3]}', "prompt[0]"),
        (COMPLETIONS, b'{"prompt": [999999999]}', "prompt[0]"),
        (COMPLETIONS, b'{"prompt": ""}', "prompt"),
        (COMPLETIONS, b'{"prompt": "x", "n": 1e9}', "n"),
        (COMPLETIONS, b'{"prompt": "x", "echo": true}', "echo"),
        (COMPLETIONS, b'{"prompt": "x", "repetition_penalty": 1.2}', "repetition_penalty"),
        (COMPLETIONS, b"[" * 50_000 + b"]" * 50_000, None),
        (CHAT, b'{"messages": []}', "messages"),
        (CHAT, b'{"messages": [{"role": "user", "content": 5}]}', "messages[0].content"),
        (
            CHAT,
            b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}',
            "tools[0].function",
        ),
        (  # named as deep as the body goes (was "tools[0].function": a user trial, 2026-12-08)
            CHAT,
            b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {}}]}',
            "tools[0].function.name",
        ),
        (CHAT, b'{"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": "x"}', "parallel_tool_calls"),
        (CHAT, b'{"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function"}}', "tool_choice"),
        (CHAT, b'"just a string"', None),
        (COMPLETIONS, b'{"prompt": "x", "temperature": 1e39}', "temperature"),
        (COMPLETIONS, b'{"prompt": "x", "stop": ["' + b"s" * 5000 + b'"]}', "stop"),
        (COMPLETIONS, b'{"prompt": "x", "stop_token_ids": [' + b"7," * 2000 + b"7]}", "stop_token_ids"),
    ],
)
def test_bad_requests_answer_400(live_server, path, body, param):
    error = _assert_openai_error(_post(live_server, path, body), 400)
    assert error["type"] == "invalid_request_error" and error["param"] == param


def test_a_trailing_slash_is_a_404_error_object_not_a_redirect(live_server):
    response = live_server.http.post("/v1/chat/completions/", json={}, headers={"host": "evil.example"})
    _assert_openai_error(response, 404)
    assert "location" not in response.headers


def test_a_wrong_type_reads_as_a_wrong_type(live_server):
    """Found by a user trial (2026-12-08): a string for parallel_tool_calls was "not supported by this server", and an
    incomplete tool_choice object was told only of the three strings."""
    chat = b'{"messages": [{"role": "user", "content": "x"}], '
    error = _assert_openai_error(_post(live_server, CHAT, chat + b'"parallel_tool_calls": "x"}'), 400)
    assert "boolean" in error["message"] and error["code"] != "unsupported", error
    error = _assert_openai_error(_post(live_server, CHAT, chat + b'"tool_choice": {"type": "function"}}'), 400)
    assert '"function": {"name"' in error["message"], error


def test_top_k_beyond_int64_is_served_and_the_engine_lives(live_server):
    """top_k past the vocabulary means "off"; a value past int64 once killed the engine thread in the sampler."""
    response = _post(live_server, COMPLETIONS, b'{"prompt": "x", "max_tokens": 2, "top_k": 9223372036854775808}')
    assert response.status_code == 200, response.text
    assert live_server.http.get("/health").status_code == 200


def test_huge_max_tokens_gives_400_with_both_numbers(live_server):
    response = _post(live_server, COMPLETIONS, b'{"prompt": "hello", "max_tokens": 100000000000}')
    error = _assert_openai_error(response, 400)
    assert error["code"] == "context_length_exceeded" and error["param"] == "max_tokens"
    assert "100000000000" in error["message"] and str(live_server.llm_engine.max_model_len) in error["message"]


def test_prompt_longer_than_context(live_server):
    prompt = [10 + i % 400 for i in range(live_server.llm_engine.max_model_len + 5)]
    error = _assert_openai_error(live_server.http.post(COMPLETIONS, json={"prompt": prompt}), 400)
    assert error["code"] == "context_length_exceeded"


def test_ten_megabyte_body_gives_413(live_server):
    body = b'{"prompt": "' + b"a" * (10 << 20) + b'"}'
    error = _assert_openai_error(_post(live_server, COMPLETIONS, body), 413)
    assert error["code"] == "request_too_large"


def test_unknown_model_path_and_method(live_server):
    _assert_openai_error(live_server.http.post(COMPLETIONS, json={"model": "gpt-9", "prompt": "x"}), 404)
    _assert_openai_error(live_server.http.get("/v1/nothing"), 404)
    wrong_method = live_server.http.get(COMPLETIONS)
    _assert_openai_error(wrong_method, 405)
    assert "POST" in wrong_method.headers["allow"]


def _engine_idle(server: LiveServer) -> bool:
    return server.metric("vllm:num_requests_running") == 0 and server.metric("vllm:kv_cache_usage_perc") == 0


def _finished_as_aborted(server: LiveServer) -> float:
    for line in server.http.get("/metrics").text.splitlines():
        if line.startswith("vllm:request_success_total{") and 'finished_reason="abort"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_disconnect_mid_stream_aborts_and_frees_blocks(live_server):
    aborted_before = live_server.metric("sluicegate_engine_requests_aborted_total")
    finished_as_aborted_before = _finished_as_aborted(live_server)
    body = {"prompt": "while True:", "max_tokens": 3000, "stream": True, "ignore_eos": True, "n": 2}
    with httpx.stream("POST", live_server.url + COMPLETIONS, json=body, timeout=60) as response:
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        wait_until(lambda: live_server.metric("vllm:kv_cache_usage_perc") > 0, what="blocks in use")
    wait_until(lambda: _engine_idle(live_server), what="blocks freed after disconnect")
    assert live_server.metric("sluicegate_engine_requests_aborted_total") == aborted_before + 1
    # As vLLM counts them: each choice finished, with reason "abort".
    assert _finished_as_aborted(live_server) == finished_as_aborted_before + 2


def test_disconnect_while_waiting_for_a_whole_response(live_server):
    aborted_before = live_server.metric("sluicegate_engine_requests_aborted_total")
    host, port = live_server.url.removeprefix("http://").split(":")
    payload = b'{"prompt": "def f():", "max_tokens": 3000, "ignore_eos": true}'
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
        )
        wait_until(lambda: live_server.metric("vllm:num_requests_running") == 1, what="request running")
    wait_until(lambda: _engine_idle(live_server), what="blocks freed after disconnect")
    assert live_server.metric("sluicegate_engine_requests_aborted_total") == aborted_before + 1


def test_full_waiting_queue_answers_503_with_retry_after(tiny_model_dir):
    server = LiveServer(make_engine(tiny_model_dir, max_num_seqs=1), max_waiting_requests=1).start()
    try:
        body = {"prompt": "x", "max_tokens": 3000, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", server.url + COMPLETIONS, json=body, timeout=60) as running:
            # Keep a reference: a collected line iterator closes the connection, which aborts the request.
            running_lines = running.iter_lines()
            next(line for line in running_lines if '"text"' in line)  # it holds the only batch slot
            with httpx.stream("POST", server.url + COMPLETIONS, json=body, timeout=60) as waiting:
                assert waiting.status_code == 200
                response = server.http.post(COMPLETIONS, json={"prompt": "y", "max_tokens": 2})
                error = _assert_openai_error(response, 503)
                assert error["code"] == "overloaded" and response.headers["retry-after"] == "1"
        wait_until(lambda: _engine_idle(server), what="both aborted")
        assert server.http.post(COMPLETIONS, json={"prompt": "y", "max_tokens": 2}).status_code == 200
        assert server.metric("sluicegate_engine_requests_rejected_total") == 1
    finally:
        server.stop()


def test_more_prompts_than_a_replica_ever_admits_is_a_400_not_a_503(tiny_model_dir):
    """An idle replica runs max_num_seqs prompts and queues max_waiting_requests more; beyond that a retry cannot
    help, so it is the client's error."""
    server = LiveServer(make_engine(tiny_model_dir, max_num_seqs=2), max_waiting_requests=1).start()
    try:
        fits = server.http.post(COMPLETIONS, json={"prompt": ["a", "b", "c"], "max_tokens": 2})
        assert fits.status_code == 200 and len(fits.json()["choices"]) == 3
        response = server.http.post(COMPLETIONS, json={"prompt": ["a", "b", "c", "d"], "max_tokens": 2})
        error = _assert_openai_error(response, 400)
        assert error["param"] == "prompt" and "retry-after" not in response.headers
    finally:
        server.stop()


def _hold_adds(llm_engine) -> threading.Event:
    """Until the returned event is set, the engine thread blocks in its first add: later requests stay submitted
    but not yet taken, as under a burst."""
    release, real_add = threading.Event(), llm_engine.add_request

    def add_request(*args, **kwargs):
        release.wait(60)
        return real_add(*args, **kwargs)

    llm_engine.add_request = add_request
    return release


def test_a_burst_on_an_idle_replica_fills_free_seats_before_the_waiting_limit(tiny_model_dir):
    server = LiveServer(make_engine(tiny_model_dir, max_num_seqs=4), max_waiting_requests=2).start()
    release = _hold_adds(server.llm_engine)
    try:
        statuses: list[int] = []
        body = {"prompt": "x", "max_tokens": 2}

        def post() -> None:
            statuses.append(server.http.post(COMPLETIONS, json=body).status_code)

        burst = [threading.Thread(target=post) for _ in range(6)]
        for thread in burst:
            thread.start()
        # All six submitted and none taken yet (a refusal would answer at once).
        wait_until(lambda: server.replica.engine._num_pending_adds == 6 or statuses, what="the burst submitted")
        # 4 free seats + 2 waiting are spoken for: a 7th would wait beyond the limit.
        response = server.http.post(COMPLETIONS, json=body)
        assert _assert_openai_error(response, 503)["code"] == "overloaded" and response.headers["retry-after"] == "1"
        release.set()
        for thread in burst:
            thread.join(60)
        assert statuses == [200] * 6
    finally:
        release.set()
        server.stop()


def test_a_request_larger_than_the_kv_cache_has_its_own_code(tiny_model_dir):
    server = LiveServer(make_engine(tiny_model_dir, num_kv_blocks=4)).start()  # 4 blocks of 16 tokens
    try:
        error = _assert_openai_error(server.http.post(COMPLETIONS, json={"prompt": "x", "max_tokens": 100}), 400)
        assert error["code"] == "kv_cache_capacity_exceeded" and error["param"] == "max_tokens"
        assert "--kv-cache-memory-bytes" in error["message"] and "--num-kv-blocks" in error["message"]
    finally:
        server.stop()


def test_health_metrics_and_concurrent_garbage(live_server):
    """Valid and invalid requests interleaved from many threads: every answer is 200 or 4xx."""
    statuses = []
    bodies = [b'{"prompt": "a", "max_tokens": 3}', b"{", b'{"prompt": 1}', b'{"messages": [{}]}', b"\x00" * 64]

    def worker(i: int) -> None:
        path = CHAT if i % 5 == 3 else COMPLETIONS
        statuses.append(_post(live_server, path, bodies[i % len(bodies)]).status_code)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(statuses) == 30 and all(s == 200 or 400 <= s < 500 for s in statuses)
    assert live_server.http.get("/health").json() == {"status": "ok"}
    text = live_server.http.get("/metrics").text
    for name in (
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
        "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket", "vllm:request_queue_time_seconds_count",
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "sluicegate_engine_swapped_out_total", "sluicegate_engine_chunked_prefill_steps_total",
        "sluicegate_engine_step_time_seconds",
    ):  # fmt: skip
        assert name in text, name


def test_a_chat_template_that_rejects_the_messages_gives_400(tiny_model_dir, tmp_path):
    """Mistral-, Llama-2- and Gemma-style templates raise on turns that do not alternate: a client error."""
    import json
    import shutil
    from pathlib import Path

    strict = tmp_path / "strict-template"
    shutil.copytree(tiny_model_dir, strict)
    template = (
        "{{ bos_token }}{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/...') }}{% endif %}"
        "{{ message['content'] }}{% endfor %}"
    )
    config = json.loads((strict / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (strict / "tokenizer_config.json").write_text(json.dumps(config))
    if Path(strict / "chat_template.jinja").exists():
        (strict / "chat_template.jinja").write_text(template)
    server = LiveServer(make_engine(str(strict))).start()
    try:
        wrong_order = [{"role": "assistant", "content": "hi"}]
        assert (
            server.http.post(CHAT, json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).status_code
            == 200
        )
        error = _assert_openai_error(server.http.post(CHAT, json={"messages": wrong_order, "max_tokens": 2}), 400)
        assert error["param"] == "messages" and "alternate" in error["message"]
        error = _assert_openai_error(server.http.post("/tokenize", json={"messages": wrong_order}), 400)
        assert error["param"] == "messages"
    finally:
        server.stop()
