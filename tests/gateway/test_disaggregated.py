"""Disaggregated prefill and decode through a real gateway (docs/architecture.md, "Disaggregated prefill and
decode"): the prefill hop's body, the decode hop's handoff, every way the prefill hop can fail (the client never
sees it) and its retry on another prefill replica, the requests that skip it, billing, release bookkeeping and the debug header. Fake replicas on loopback
(disagg_upstream.py), the prefix router, the official openai client."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from gateway.access_log import ACCESS_LOGGER
from gateway.request import overlap
from tests.gateway.conftest import REDIS_URL, Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.disagg_upstream import (
    FAILING,
    GARBAGE,
    HANDOFF,
    MISSING,
    NO_BLOCKS,
    PREFILL_CACHED_TOKENS,
    SLOW,
    HandoffRefusingUpstream,
    PrefillUpstream,
    ResettingPrefill,
)
from tests.gateway.fake_upstream import TOKEN, FakeUpstream
from tests.gateway.servers import ThreadServer, free_port
from tests.log_capture import captured

CHAT = [{"role": "user", "content": "a prompt long enough to fill a block or two of the tiny model's cache " * 3}]
PREFILL_TIMEOUT_S = 0.5
SHORT_PROMPT_TOKENS = 32  # CHAT is longer; "hi" is shorter


def split_config(replicas: list[tuple[str, str, str]], tokenizer_dir: str, redis_url: str | None = None) -> dict:
    """A gateway on the prefix router over (name, url, role) replicas, debug headers on; the probes and breakers
    stay out of the way (a test makes replicas fail on purpose)."""
    config = gateway_config(
        [],
        tokenizer_dir,
        redis_url,
        router="gateway.routing.factory:build_router",
        debug_headers=True,
        upstream={"prefill_timeout_s": PREFILL_TIMEOUT_S},
    )
    config["models"]["tiny"]["replicas"] = [
        {"name": name, "url": url, "role": role, "kv_events": False} for name, url, role in replicas
    ]
    config["models"]["tiny"]["health"] = {"interval_s": 60, "breaker_failures": 1000}
    config["models"]["tiny"]["prefill_min_prompt_tokens"] = SHORT_PROMPT_TOKENS
    return config


class Pool:
    """A prefill replica p0, a decode replica d0 and a both replica b0, and a gateway in front of them."""

    def __init__(self, prefill: PrefillUpstream, decode: FakeUpstream, both: FakeUpstream, gw, **limits) -> None:
        self.prefill, self.decode, self.both, self.gw = prefill, decode, both, gw
        self.admin = Admin(gw.url)
        self.key = self.admin.key(self.admin.tenant(**limits))

    def client(self, key: str | None = None) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gw.url + "/v1", api_key=key or self.key, max_retries=0, timeout=30)

    def sample(self, name: str, **labels: str) -> float:
        return self.gw.gateway.metrics.registry.get_sample_value(name, labels) or 0.0

    def hops(self, outcome: str, reason: str) -> float:
        return self.sample("sluicegate_prefill_hops_total", model="tiny", outcome=outcome, reason=reason)

    def routed(self, replica: str, outcome: str) -> float:
        return self.sample("sluicegate_routing_outcomes_total", model="tiny", replica=replica, outcome=outcome)

    def idle(self) -> bool:
        return all(info.inflight_requests == 0 for info in self.gw.gateway.router.replicas("tiny"))


@pytest.fixture(scope="module")
def servers():
    prefill, decode, both = PrefillUpstream(), FakeUpstream(), FakeUpstream()
    with ThreadServer(prefill.app) as p, ThreadServer(decode.app) as d, ThreadServer(both.app) as b:
        yield prefill, decode, both, (p.url, d.url, b.url)


@pytest.fixture(scope="module")
def module_pool(servers, tokenizer_dir):
    prefill, decode, both, (p_url, d_url, b_url) = servers
    replicas = [("p0", p_url, "prefill"), ("d0", d_url, "decode"), ("b0", b_url, "both")]
    with serve_gateway(split_config(replicas, tokenizer_dir)) as gw:
        yield Pool(prefill, decode, both, gw)


@pytest.fixture
def pool(module_pool):
    """The module's pool with its fakes' records cleared and the prefill replica answering normally."""
    for upstream in (module_pool.prefill, module_pool.decode, module_pool.both):
        upstream.received.clear()
    module_pool.prefill.handed.clear()
    module_pool.prefill.mode = HANDOFF
    yield module_pool
    wait_until(module_pool.idle)  # every route released, whatever the test did


@pytest.mark.parametrize("stream", [False, True])
def test_a_chat_takes_the_prefill_hop_and_its_handoff_goes_to_the_decode_replica(pool, stream):
    fake = {"tokens": 5}
    with captured(ACCESS_LOGGER) as lines:
        raw = pool.client().chat.completions.with_raw_response.create(
            model="tiny", messages=CHAT, max_completion_tokens=9, stream=stream, extra_body={"fake": fake}
        )
        if stream:
            text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
        else:
            text = raw.parse().choices[0].message.content
        wait_until(lambda: any(r.get("request_id") == raw.headers["x-request-id"] for r in lines.records()))
    assert text == TOKEN * 5  # the decode replica's answer, as without disaggregation
    assert raw.headers["x-sluicegate-replica"] == "d0" and raw.headers["x-sluicegate-prefill-replica"] == "p0"
    [logged] = [r for r in lines.records() if r["request_id"] == raw.headers["x-request-id"]]
    assert (logged["replica"], logged["prefill_replica"]) == ("d0", "p0")  # the access log names both hops

    [prefill_body], [decode_body] = pool.prefill.received, pool.decode.received
    assert prefill_body["stream"] is False and "stream_options" not in prefill_body
    assert prefill_body["max_tokens"] == 1 and "max_completion_tokens" not in prefill_body
    assert prefill_body["n"] == 1 and prefill_body["kv_transfer_params"] == {"do_remote_decode": True}
    assert decode_body["kv_transfer_params"] == pool.prefill.handed[0]  # unchanged
    assert decode_body["stream"] is stream and decode_body["max_completion_tokens"] == 9
    assert ("stream_options" in decode_body) is stream and "max_tokens" not in decode_body
    for name in ("messages", "model", "cache_salt", "fake"):  # the same request otherwise: same prompt, same salt
        assert prefill_body[name] == decode_body[name]
    assert pool.both.received == []  # the both replica serves whole requests only
    assert pool.hops("ok", "handoff") >= 1


def test_the_decode_replica_queues_no_prefill_for_what_the_handoff_covers(pool):
    # A prompt of its own (no earlier request makes it a prefix hit); the fake hands over 48 tokens.
    chat = [{"role": "user", "content": "tokens the prefill replica hands over to the decode replica " * 8}]
    d0 = pool.gw.gateway.router._models["tiny"].replicas["d0"].load
    fake = {"tokens": 2, "chunk_delay_s": 0.5}  # the decode hop's first chunk comes late: its prefill still queues

    def stream() -> str:
        chunks = pool.client().chat.completions.create(
            model="tiny", messages=chat, max_tokens=2, stream=True, extra_body={"fake": fake}
        )
        return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)

    with ThreadPoolExecutor(1) as executor:
        answer = executor.submit(stream)
        wait_until(lambda: d0.inflight_requests == 1)
        queued, held = d0.queued_prefill_tokens, d0.inflight_prompt_tokens
        assert answer.result() == TOKEN * 2
    assert pool.decode.received[0]["kv_transfer_params"]["remote_num_tokens"] == 48
    assert held > 48 and queued == held - 48  # it holds the whole prompt's KV and computes what was not handed over


def test_a_completion_takes_both_hops_without_options_the_prefill_cannot_take(pool):
    answer = pool.client().completions.create(
        model="tiny", prompt="once upon a time " * 10, max_tokens=4, extra_body={"min_tokens": 3}
    )
    assert answer.choices[0].text == TOKEN * 4
    [prefill_body], [decode_body] = pool.prefill.received, pool.decode.received
    assert prefill_body["max_tokens"] == 1 and "min_tokens" not in prefill_body
    assert decode_body["max_tokens"] == 4 and decode_body["min_tokens"] == 3
    assert decode_body["kv_transfer_params"] == pool.prefill.handed[0]


@pytest.mark.parametrize(
    "mode, outcome, reason, blamed",
    [
        (FAILING, "fallback", "http_500", True),
        (GARBAGE, "fallback", "malformed", True),
        (MISSING, "fallback", "malformed", True),
        (SLOW, "fallback", "timeout", True),
        (NO_BLOCKS, "ok", "no_handoff", False),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_without_a_handoff_the_decode_replica_prefills_and_the_client_sees_nothing(
    pool, mode, outcome, reason, blamed, stream
):
    pool.prefill.mode, pool.prefill.delay_s = mode, PREFILL_TIMEOUT_S * 4
    counted, errors = pool.hops(outcome, reason), pool.routed("p0", "error_before_first_byte")
    raw = pool.client().chat.completions.with_raw_response.create(
        model="tiny", messages=CHAT, max_tokens=3, stream=stream
    )
    if stream:
        text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    else:
        text = raw.parse().choices[0].message.content
    assert text == TOKEN * 3 and raw.headers["x-sluicegate-replica"] == "d0"
    assert "x-sluicegate-prefill-replica" not in raw.headers  # no handoff reached the decode replica
    assert len(pool.prefill.received) == 1
    [decode_body] = pool.decode.received
    assert "kv_transfer_params" not in decode_body and decode_body["stream"] is stream
    assert pool.hops(outcome, reason) == counted + 1
    # the prefill route was released with the failure (its breaker and load estimate see it), or as served
    assert pool.routed("p0", "error_before_first_byte") == errors + blamed


def test_with_no_routable_prefill_replica_the_decode_replica_prefills(pool):
    assert pool.admin.http.post("/models/tiny/replicas/p0/drain").json()["state"] == "draining"
    try:
        counted = pool.hops("fallback", "no_replica")
        answer = pool.client().chat.completions.create(model="tiny", messages=CHAT, max_tokens=2)
        assert answer.choices[0].message.content == TOKEN * 2
        assert pool.prefill.received == [] and "kv_transfer_params" not in pool.decode.received[0]
        assert pool.hops("fallback", "no_replica") == counted + 1
    finally:
        p0 = next(r for r in pool.admin.http.get("/models/tiny/replicas").json()["data"] if r["name"] == "p0")
        again = pool.admin.http.post("/models/tiny/replicas", json={k: p0[k] for k in ("name", "url", "role")})
        assert again.json()["state"] == "active"


def test_several_completions_and_embeddings_are_served_whole(pool):
    skipped = pool.hops("skipped", "n")
    answer = pool.client().chat.completions.create(model="tiny", messages=CHAT, max_tokens=2, n=2)
    assert answer.choices[0].message.content == TOKEN * 2
    batch = pool.client().completions.create(model="tiny", prompt=["one prompt", "another"], max_tokens=2)
    assert batch.choices[0].text == TOKEN * 2
    embedded = pool.client().embeddings.create(model="tiny", input=["embed me", "and me"])
    assert [e.embedding for e in embedded.data] == [[0.0, 1.0], [1.0, 1.0]]
    assert pool.prefill.received == [] and pool.decode.received == []  # the both replica took all three
    assert [b.get("n") for b in pool.both.received] == [2, None, None]
    assert all("kv_transfer_params" not in b for b in pool.both.received)
    assert pool.hops("skipped", "n") == skipped + 2  # embeddings are never a hop


def test_a_short_prompt_skips_the_prefill_hop_and_the_decode_replica_computes_it(pool):
    skipped = pool.hops("skipped", "short")
    raw = pool.client().chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert raw.parse().choices[0].message.content == TOKEN * 2
    assert raw.headers["x-sluicegate-replica"] == "d0" and "x-sluicegate-prefill-replica" not in raw.headers
    assert pool.prefill.received == [] and "kv_transfer_params" not in pool.decode.received[0]
    assert pool.hops("skipped", "short") == skipped + 1


def test_only_the_decode_hop_is_billed(pool):
    tenant = pool.admin.tenant()
    key = pool.admin.key(tenant)
    fake = {"tokens": 5, "prompt_tokens": 7}
    pool.client(key).chat.completions.create(model="tiny", messages=CHAT, max_tokens=6, extra_body={"fake": fake})
    stream = pool.client(key).chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=6, stream=True, extra_body={"fake": fake}
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == TOKEN * 5
    assert len(pool.prefill.handed) == 2  # both hops happened, each time
    usage = wait_until(lambda: (u := pool.admin.usage(tenant))["requests"] == 2 and u)
    assert (usage["input_tokens"], usage["output_tokens"]) == (14, 10)  # not the prefill's 901 + 1


def test_the_handed_over_prompt_is_billed_and_shown_as_the_prefill_replica_computed_it(pool):
    """The decode replica reports the 48 handed-over tokens as cached (vLLM's does too); 16 of them came from the
    prefill replica's own cache, the rest it computed: 16 are billed as cached, not 48, and the client's usage says
    16, streamed or not, so that the answer and the bill agree."""
    tenant = pool.admin.tenant()
    key = pool.admin.key(tenant)
    fake = {"tokens": 2, "prompt_tokens": 60, "cached_tokens": 48}
    reply = pool.client(key).chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=2, extra_body={"fake": fake}
    )
    assert reply.usage.prompt_tokens_details.cached_tokens == PREFILL_CACHED_TOKENS
    assert reply.usage.prompt_tokens == 60 and reply.choices[0].message.content == TOKEN * 2
    stream = pool.client(key).chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=2, stream=True, stream_options={"include_usage": True},
        extra_body={"fake": fake},
    )  # fmt: skip
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TOKEN * 2
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == PREFILL_CACHED_TOKENS
    assert len(pool.prefill.handed) == 2
    usage = wait_until(lambda: (u := pool.admin.usage(tenant))["requests"] == 2 and u)
    assert (usage["input_tokens"], usage["cached_input_tokens"]) == (120, 2 * PREFILL_CACHED_TOKENS)
    # served whole by the both replica (no handoff), the same report is the replica's own cache: billed as cached
    answer = pool.client(key).completions.create(
        model="tiny", prompt="hi", max_tokens=2, n=2, extra_body={"fake": fake}
    )
    assert answer.usage.prompt_tokens_details.cached_tokens == 48
    usage = wait_until(lambda: (u := pool.admin.usage(tenant))["requests"] == 3 and u)
    assert usage["cached_input_tokens"] == 2 * PREFILL_CACHED_TOKENS + 48


def test_a_client_cannot_send_its_own_kv_transfer_params(pool):
    handoff = {"do_remote_prefill": True, "remote_host": "10.9.9.9", "remote_port": 1, "remote_block_ids": [0]}
    response = httpx.post(
        pool.gw.url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {pool.key}"},
        json={"model": "tiny", "messages": CHAT, "kv_transfer_params": handoff},
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "kv_transfer_params"
    assert pool.prefill.received == [] and pool.decode.received == []


def _leave_during_the_prefill_hop(pool, stream: bool) -> None:
    pool.prefill.mode, pool.prefill.delay_s = SLOW, PREFILL_TIMEOUT_S * 0.8  # slow, within the hop's timeout
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            pool.gw.url + "/v1/chat/completions",
            headers={"authorization": f"Bearer {pool.key}"},
            json={"model": "tiny", "messages": CHAT, "max_tokens": 2, "stream": stream},
            timeout=PREFILL_TIMEOUT_S * 0.3,
        )


def test_a_stream_whose_client_left_during_the_prefill_hop_stops_and_releases_its_route(pool):
    gone = pool.routed("p0", "client_disconnect")
    _leave_during_the_prefill_hop(pool, stream=True)
    wait_until(lambda: pool.routed("p0", "client_disconnect") == gone + 1)
    assert len(pool.prefill.received) == 1 and pool.decode.received == []  # the decode hop never started


def test_a_non_streamed_request_whose_client_left_during_the_prefill_hop_runs_to_its_end(pool):
    """As any non-streamed request whose client left (tests/gateway/test_client_gone.py): it is answered and
    charged, the answer dropped."""
    _leave_during_the_prefill_hop(pool, stream=False)
    gone = pool.routed("p0", "client_disconnect")
    wait_until(lambda: len(pool.decode.received) == 1, timeout_s=PREFILL_TIMEOUT_S * 3)  # the decode hop ran
    wait_until(pool.idle)
    assert len(pool.prefill.received) == 1 and pool.routed("p0", "client_disconnect") == gone


def test_a_refused_handoff_is_sent_again_without_it(tokenizer_dir):
    prefill, decode = PrefillUpstream(), HandoffRefusingUpstream()
    with ThreadServer(prefill.app) as p, ThreadServer(decode.app) as d:
        config = split_config([("p0", p.url, "prefill"), ("d0", d.url, "decode")], tokenizer_dir)
        with serve_gateway(config) as gw:
            pool = Pool(prefill, decode, FakeUpstream(), gw)
            answer = pool.client().chat.completions.create(model="tiny", messages=CHAT, max_tokens=2)
            assert answer.choices[0].message.content == TOKEN * 2
            refused, served = decode.received
            assert refused["kv_transfer_params"] == prefill.handed[0] and "kv_transfer_params" not in served
            assert pool.sample("sluicegate_upstream_errors_total", kind="handoff_refused") == 1
            wait_until(pool.idle)


def test_the_decode_hop_fails_over_with_its_handoff_then_to_a_both_replica_without(tokenizer_dir):
    prefill, decode, both = PrefillUpstream(), FakeUpstream(), FakeUpstream()
    dead = f"http://127.0.0.1:{free_port()}"
    with ThreadServer(prefill.app) as p, ThreadServer(decode.app) as d, ThreadServer(both.app) as b:
        replicas = [("p0", p.url, "prefill"), ("dead", dead, "decode"), ("d1", d.url, "decode"), ("b0", b.url, "both")]
        with serve_gateway(split_config(replicas, tokenizer_dir)) as gw:
            pool = Pool(prefill, decode, both, gw)
            for _ in range(2):  # whichever decode replica the policy tries first, the live one answers
                raw = pool.client().chat.completions.with_raw_response.create(model="tiny", messages=CHAT, max_tokens=2)
                assert raw.headers["x-sluicegate-replica"] == "d1"
            assert [body["kv_transfer_params"] for body in decode.received] == prefill.handed
            assert both.received == []

            assert pool.admin.http.delete("/models/tiny/replicas/d1").status_code == 200
            raw = pool.client().chat.completions.with_raw_response.create(model="tiny", messages=CHAT, max_tokens=2)
            assert raw.parse().choices[0].message.content == TOKEN * 2
            assert raw.headers["x-sluicegate-replica"] == "b0" and "x-sluicegate-prefill-replica" not in raw.headers
            assert len(prefill.handed) == 3 and "kv_transfer_params" not in both.received[0]  # it prefills itself
            wait_until(pool.idle)


def test_a_prefill_replica_that_is_down_costs_the_client_nothing(tokenizer_dir):
    decode = FakeUpstream()
    dead = f"http://127.0.0.1:{free_port()}"
    with ThreadServer(decode.app) as d:
        config = split_config([("p0", dead, "prefill"), ("d0", d.url, "decode")], tokenizer_dir)
        with serve_gateway(config) as gw:
            pool = Pool(PrefillUpstream(), decode, FakeUpstream(), gw)
            answer = pool.client().chat.completions.create(model="tiny", messages=CHAT, max_tokens=2, stream=False)
            assert answer.choices[0].message.content == TOKEN * 2
            assert "kv_transfer_params" not in decode.received[0]
            assert pool.hops("fallback", "connect") == 1 and pool.routed("p0", "error_before_first_byte") == 1
            assert pool.hops("retried", "connect") == 0  # no other prefill replica to retry on
            assert pool.sample("sluicegate_prefill_hop_seconds_count", model="tiny") == 1
            wait_until(pool.idle)


def two_prefill_config(p0_url: str, p1_url: str, d_url: str, tokenizer_dir: str) -> dict:
    """Prefill replicas p0 and p1 and a decode replica d0; round robin, so a fresh gateway's first hop tries p0."""
    replicas = [("p0", p0_url, "prefill"), ("p1", p1_url, "prefill"), ("d0", d_url, "decode")]
    config = split_config(replicas, tokenizer_dir)
    config["models"]["tiny"]["routing"] = {"policy": "round_robin"}
    return config


@pytest.mark.parametrize("failure, reason", [("dead", "connect"), (FAILING, "http_500"), (SLOW, "timeout")])
def test_a_prefill_hop_that_fails_before_an_answer_is_retried_on_another_prefill_replica(
    tokenizer_dir, failure, reason
):
    first = PrefillUpstream(HANDOFF if failure == "dead" else failure, delay_s=PREFILL_TIMEOUT_S * 4)
    second, decode = PrefillUpstream(), FakeUpstream()
    with ThreadServer(first.app) as p0, ThreadServer(second.app) as p1, ThreadServer(decode.app) as d:
        p0_url = f"http://127.0.0.1:{free_port()}" if failure == "dead" else p0.url
        with serve_gateway(two_prefill_config(p0_url, p1.url, d.url, tokenizer_dir)) as gw:
            pool = Pool(second, decode, FakeUpstream(), gw)
            raw = pool.client().chat.completions.with_raw_response.create(model="tiny", messages=CHAT, max_tokens=2)
            assert raw.parse().choices[0].message.content == TOKEN * 2
            assert raw.headers["x-sluicegate-replica"] == "d0" and raw.headers["x-sluicegate-prefill-replica"] == "p1"
            assert len(first.received) == (failure != "dead") and len(second.received) == 1
            [decode_body] = decode.received
            assert decode_body["kv_transfer_params"] == second.handed[0]  # the second replica's handoff
            assert pool.hops("retried", reason) == 1 and pool.hops("ok", "handoff") == 1
            assert pool.hops("fallback", reason) == 0
            assert pool.routed("p0", "error_before_first_byte") == 1 and pool.routed("p1", "ok") == 1
            assert pool.sample("sluicegate_prefill_hop_seconds_count", model="tiny") == 1  # one hop, two tries
            wait_until(pool.idle)


def test_with_every_prefill_replica_down_the_retried_hop_falls_back(tokenizer_dir):
    decode = FakeUpstream()
    dead_0, dead_1 = (f"http://127.0.0.1:{free_port()}" for _ in range(2))
    with ThreadServer(decode.app) as d:
        config = two_prefill_config(dead_0, dead_1, d.url, tokenizer_dir)
        with serve_gateway(config) as gw:
            pool = Pool(PrefillUpstream(), decode, FakeUpstream(), gw)
            raw = pool.client().chat.completions.with_raw_response.create(model="tiny", messages=CHAT, max_tokens=2)
            assert raw.parse().choices[0].message.content == TOKEN * 2
            assert "x-sluicegate-prefill-replica" not in raw.headers
            assert "kv_transfer_params" not in decode.received[0]  # the decode replica prefilled itself
            assert pool.hops("retried", "connect") == 1 and pool.hops("fallback", "connect") == 1
            assert pool.routed("p0", "error_before_first_byte") == pool.routed("p1", "error_before_first_byte") == 1
            wait_until(pool.idle)


def test_an_answer_without_a_handoff_is_not_retried(tokenizer_dir):
    """The replica answered: not a prefill replica (or a 4xx, the request's own fault), which a second try would
    meet again."""
    first, second, decode = PrefillUpstream(MISSING), PrefillUpstream(), FakeUpstream()
    with ThreadServer(first.app) as p0, ThreadServer(second.app) as p1, ThreadServer(decode.app) as d:
        config = two_prefill_config(p0.url, p1.url, d.url, tokenizer_dir)
        with serve_gateway(config) as gw:
            pool = Pool(second, decode, FakeUpstream(), gw)
            answer = pool.client().chat.completions.create(model="tiny", messages=CHAT, max_tokens=2)
            assert answer.choices[0].message.content == TOKEN * 2
            assert len(first.received) == 1 and second.received == []
            assert "kv_transfer_params" not in decode.received[0]
            assert pool.hops("fallback", "malformed") == 1 and pool.hops("retried", "malformed") == 0
            wait_until(pool.idle)


def test_a_stale_pooled_connection_to_a_prefill_replica_earns_a_fresh_one(tokenizer_dir):
    decode = FakeUpstream()
    with ResettingPrefill() as prefill, ThreadServer(decode.app) as d:
        config = split_config([("p0", prefill.url, "prefill"), ("d0", d.url, "decode")], tokenizer_dir)
        with serve_gateway(config) as gw:
            pool = Pool(PrefillUpstream(), decode, FakeUpstream(), gw)
            for _ in range(2):  # the second finds the first's kept-alive connection dead
                answer = pool.client().chat.completions.create(model="tiny", messages=CHAT, max_tokens=2)
                assert answer.choices[0].message.content == TOKEN * 2
            assert prefill.resets == 1 and pool.hops("ok", "handoff") == 2
            assert [body["kv_transfer_params"] for body in decode.received] == prefill.handed
            wait_until(pool.idle)


def test_an_overlapped_admission_takes_both_hops(servers, tokenizer_dir, clean_redis, monkeypatch):
    monkeypatch.setattr(overlap, "MAX_VIEW_AGE_S", 60.0)
    prefill, decode, both, (p_url, d_url, b_url) = servers
    prefill.mode = HANDOFF
    replicas = [("p0", p_url, "prefill"), ("d0", d_url, "decode"), ("b0", b_url, "both")]
    with serve_gateway(split_config(replicas, tokenizer_dir, REDIS_URL)) as gw:
        pool = Pool(prefill, decode, both, gw, rpm=1000, input_tpm=1_000_000, output_tpm=1_000_000)
        handed = len(prefill.handed)
        decode.received.clear()
        for _ in range(3):  # the first is admitted first; the next ones are sent while their admission runs
            answer = pool.client().chat.completions.create(model="tiny", messages=CHAT, max_tokens=2)
            assert answer.choices[0].message.content == TOKEN * 2
        assert pool.sample("sluicegate_admissions_overlapped_total") >= 1
        assert [body["kv_transfer_params"] for body in decode.received] == prefill.handed[handed:]
        assert len(prefill.handed) == handed + 3
        wait_until(pool.idle)


def test_a_prefill_replica_added_at_run_time_splits_the_model(servers, tokenizer_dir):
    prefill, decode, _, (p_url, d_url, _) = servers
    prefill.mode = HANDOFF
    with serve_gateway(split_config([("d0", d_url, "decode")], tokenizer_dir)) as gw:
        pool = Pool(prefill, decode, FakeUpstream(), gw)
        prefill.received.clear()
        decode.received.clear()
        pool.client().chat.completions.create(model="tiny", messages=CHAT, max_tokens=2)
        assert prefill.received == [] and "kv_transfer_params" not in decode.received[-1]  # one hop, as before

        added = pool.admin.http.post("/models/tiny/replicas", json={"name": "p0", "url": p_url, "role": "prefill"})
        assert added.status_code == 201 and added.json()["role"] == "prefill"
        pool.client().chat.completions.create(model="tiny", messages=CHAT, max_tokens=2)
        assert len(prefill.received) == 1 and decode.received[-1]["kv_transfer_params"] == prefill.handed[-1]

        assert pool.admin.http.delete("/models/tiny/replicas/p0").status_code == 200
        pool.client().chat.completions.create(model="tiny", messages=CHAT, max_tokens=2)
        assert len(prefill.received) == 1 and "kv_transfer_params" not in decode.received[-1]  # one hop again
        wait_until(pool.idle)
