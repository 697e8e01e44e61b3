"""Disaggregated prefill and decode for real: a prefill replica and a decode replica on loopback, each with its own
NIXL agent (UCX, host memory), the blocks read between them; outputs compared with a replica doing both. The two
hops are what the gateway sends (docs/architecture.md, "Disaggregated prefill and decode")."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import httpx
import openai
import pytest

from tests.engine.server.live import LiveServer, make_engine, wait_until

BLOCK_SIZE = 16
PROMPTS = [
    "The quick brown fox jumps over the lazy dog. " * 4,  # 121 tokens: 7 blocks handed over, 9 tokens computed
    "Sphinx of black quartz, judge my vow; pack my box with five dozen liquor jugs. " * 2,
]


@pytest.fixture(scope="module")
def prefill(tiny_model_dir):
    server = LiveServer(
        make_engine(tiny_model_dir, served_model_name="tiny", kv_role="prefill", kv_transfer_timeout_s=3.0)
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def decode(tiny_model_dir):
    server = LiveServer(
        make_engine(tiny_model_dir, served_model_name="tiny", kv_role="decode"), kv_transfer_read_timeout_s=5.0
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def colocated(tiny_model_dir):
    server = LiveServer(make_engine(tiny_model_dir, served_model_name="tiny")).start()
    yield server
    server.stop()


def prefill_hop(server: LiveServer, body: dict) -> dict:
    """The gateway's first request: the body, one token, not streamed, handing off."""
    hop = {**body, "max_tokens": 1, "stream": False, "kv_transfer_params": {"do_remote_decode": True}}
    hop.pop("stream_options", None)
    answer = server.http.post("/v1/completions", json=hop)
    assert answer.status_code == 200, answer.text
    return answer.json()["kv_transfer_params"]


def client(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1.0, "top_p": 0.9, "seed": 7}])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_decode_after_a_remote_prefill_is_token_identical_to_one_replica(prefill, decode, colocated, prompt, sampling):
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 24, "logprobs": 0, **sampling}
    expected = client(colocated).completions.create(**body)
    read_before = decode.metric("sluicegate_engine_kv_blocks_read_total")
    cached_before = decode.metric("sluicegate_engine_kv_blocks_already_cached_total")

    params = prefill_hop(prefill, body)
    assert params["do_remote_prefill"] is True and params["remote_port"] == int(prefill.url.rsplit(":", 1)[1])
    num_blocks = len(params["remote_block_ids"])
    assert num_blocks == params["remote_num_tokens"] // BLOCK_SIZE == (expected.usage.prompt_tokens - 1) // BLOCK_SIZE

    answer = client(decode).completions.create(**body, extra_body={"kv_transfer_params": params})
    assert answer.choices[0].text == expected.choices[0].text
    assert answer.choices[0].logprobs.tokens == expected.choices[0].logprobs.tokens
    # Every handed block was either read or already cached here, and the request found them all as a prefix hit.
    read = decode.metric("sluicegate_engine_kv_blocks_read_total") - read_before
    cached = decode.metric("sluicegate_engine_kv_blocks_already_cached_total") - cached_before
    assert read + cached == num_blocks
    assert answer.usage.prompt_tokens_details.cached_tokens == num_blocks * BLOCK_SIZE
    # The prefill replica frees what it held once the decode replica has read it.
    wait_until(lambda: prefill.metric("sluicegate_engine_kv_handoffs_held") == 0, what="handoff released")


def test_a_streamed_decode_reads_the_blocks_and_streams_the_same_text(prefill, decode, colocated):
    prompt = "Streams arrive one token at a time, and the gateway passes them through. " * 3
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 20, "temperature": 0}
    expected = client(colocated).completions.create(**body).choices[0].text
    read_before = decode.metric("sluicegate_engine_kv_blocks_read_total")
    params = prefill_hop(prefill, {**body, "stream": True, "stream_options": {"include_usage": True}})
    stream = client(decode).completions.create(
        **body, stream=True, stream_options={"include_usage": True}, extra_body={"kv_transfer_params": params}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == expected
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == params["remote_num_tokens"]
    assert decode.metric("sluicegate_engine_kv_blocks_read_total") - read_before == len(params["remote_block_ids"])


def test_a_prefix_the_decode_replica_holds_is_not_read_again(prefill, decode):
    body = {"model": "tiny", "prompt": "Cached prefixes stay on the decode replica between requests. " * 3}
    body |= {"max_tokens": 4, "temperature": 0}
    first = prefill_hop(prefill, body)
    client(decode).completions.create(**body, extra_body={"kv_transfer_params": first})
    read_before = decode.metric("sluicegate_engine_kv_blocks_read_total")
    second = prefill_hop(prefill, body)
    answer = client(decode).completions.create(**body, extra_body={"kv_transfer_params": second})
    assert decode.metric("sluicegate_engine_kv_blocks_read_total") == read_before
    assert answer.usage.prompt_tokens_details.cached_tokens == second["remote_num_tokens"]
    wait_until(lambda: prefill.metric("sluicegate_engine_kv_handoffs_held") == 0, what="notified without a read")


def fallbacks(server: LiveServer, reason: str) -> float:
    for line in server.http.get("/metrics").text.splitlines():
        if line.startswith("sluicegate_engine_kv_pull_fallbacks_total{") and f'reason="{reason}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no fallback series for {reason}")


def test_blocks_of_another_prompt_are_refused_and_the_prompt_is_computed_here(prefill, decode, colocated):
    """The decode replica checks the handed prefix's hash chain against its own prompt's: KV of another prompt
    (or another cache_salt) is never used."""
    body = {"model": "tiny", "prompt": PROMPTS[0] + "A different ending.", "max_tokens": 12, "temperature": 0}
    params = prefill_hop(prefill, {**body, "prompt": PROMPTS[1]})
    before = fallbacks(decode, "mismatch")
    answer = client(decode).completions.create(**body, extra_body={"kv_transfer_params": params})
    assert fallbacks(decode, "mismatch") == before + 1
    assert answer.choices[0].text == client(colocated).completions.create(**body).choices[0].text
    wait_until(lambda: prefill.metric("sluicegate_engine_kv_handoffs_held") == 0, what="refused handoff released")

    salted = prefill_hop(prefill, {**body, "cache_salt": "tenant-a"})
    before = fallbacks(decode, "mismatch")
    client(decode).completions.create(**body, extra_body={"kv_transfer_params": salted, "cache_salt": "tenant-b"})
    assert fallbacks(decode, "mismatch") == before + 1


def test_an_unreachable_prefill_replica_costs_latency_not_an_error(prefill, decode, colocated):
    body = {"model": "tiny", "prompt": "Nobody answers on that port. " * 5, "max_tokens": 10, "temperature": 0}
    params = prefill_hop(prefill, body)
    expired_before = prefill.metric("sluicegate_engine_kv_handoffs_expired_total")
    gone = {**params, "remote_engine_id": "0" * 32, "remote_port": 9}  # the discard port: nothing listens
    before = fallbacks(decode, "metadata")
    answer = client(decode).completions.create(**body, extra_body={"kv_transfer_params": gone})
    assert answer.choices[0].text == client(colocated).completions.create(**body).choices[0].text
    assert fallbacks(decode, "metadata") == before + 1
    # Nobody read the real handoff: the prefill replica frees it at its deadline (3 s here).
    wait_until(lambda: prefill.metric("sluicegate_engine_kv_handoffs_expired_total") == expired_before + 1)
    assert prefill.metric("sluicegate_engine_kv_handoffs_held") == 0


def test_a_prompt_without_a_full_block_to_hand_over_answers_null(prefill):
    answer = prefill.http.post(
        "/v1/completions",
        json={"prompt": "short", "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}},
    )
    assert answer.status_code == 200 and answer.json()["kv_transfer_params"] is None


@pytest.mark.parametrize(
    "server_name, body, param",
    [
        ("decode", {"kv_transfer_params": {"do_remote_decode": True}}, "kv_transfer_params"),
        ("colocated", {"kv_transfer_params": {"do_remote_decode": True}}, "kv_transfer_params"),
        ("prefill", {"kv_transfer_params": {"do_remote_decode": True}, "stream": True}, "stream"),
        ("prefill", {"kv_transfer_params": {"do_remote_decode": True}, "n": 2}, "n"),
        ("prefill", {"kv_transfer_params": {"do_remote_decode": True}, "prompt": ["a b c", "d e f"]}, "prompt"),
        ("prefill", {"kv_transfer_params": {"do_remote_decode": "yes"}}, "kv_transfer_params.do_remote_decode"),
        ("decode", {"kv_transfer_params": {"do_remote_prefill": True}}, "kv_transfer_params.remote_block_ids"),
        ("decode", {"kv_transfer_params": []}, "kv_transfer_params"),
    ],
)
def test_bad_transfer_requests_get_a_400_naming_the_field(request, server_name, body, param):
    server = request.getfixturevalue(server_name)
    answer = server.http.post("/v1/completions", json={"prompt": "a b c " * 20, "max_tokens": 2, **body})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param


def test_only_a_prefill_replica_serves_transfer_metadata(prefill, decode):
    metadata = prefill.http.get("/v1/kv_transfer/metadata").json()
    assert metadata["layout"]["block_size"] == BLOCK_SIZE and metadata["layout"]["memory"] == "DRAM"
    assert len(metadata["layout"]["regions"]) == 2 * 2  # key and value of the tiny model's 2 layers
    answer = decode.http.get("/v1/kv_transfer/metadata")
    assert answer.status_code == 404 and answer.json()["error"]["type"]


def test_a_prefill_replica_in_another_process(tiny_model_dir, decode, colocated):
    """`sluicegate engine --kv-role prefill` as its own process: the read crosses processes, as in production."""
    port = _free_port()
    command = [sys.executable, "-m", "sluicegate.cli", "engine", "--model", tiny_model_dir, "--port", str(port)]
    command += [
        "--served-model-name",
        "tiny",
        "--kv-role",
        "prefill",
        "--num-kv-blocks",
        "256",
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=60) as http:

            def healthy() -> bool:
                assert proc.poll() is None, "the prefill replica exited"
                try:
                    return http.get("/health").status_code == 200
                except httpx.TransportError:
                    return False

            wait_until(healthy, timeout_s=180, interval_s=0.2, what="prefill replica up")
            body = {"model": "tiny", "prompt": "Across processes the blocks travel through UCX. " * 4}
            body |= {"max_tokens": 16, "temperature": 0}
            hop = http.post(
                "/v1/completions", json={**body, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}
            )
            params = hop.json()["kv_transfer_params"]
            read_before = decode.metric("sluicegate_engine_kv_blocks_read_total")
            answer = client(decode).completions.create(**body, extra_body={"kv_transfer_params": params})
            assert decode.metric("sluicegate_engine_kv_blocks_read_total") - read_before == len(
                params["remote_block_ids"]
            )
            assert answer.choices[0].text == client(colocated).completions.create(**body).choices[0].text
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
