"""A client that leaves (a timeout, a closed connection) is charged for what the replica did, for real: gateway +
Redis + an upstream on loopback. A non-streamed request runs to its end and is charged its usage, as OpenAI charges
one whose client timed out; a stream stops at once and is charged what was generated up to the cut."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.conftest import REDIS_URL, Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.servers import ThreadServer
from tests.gateway.slow_upstream import SlowUpstream

PIECES = ["tok "] * 20  # 20 completion tokens, 5 prompt tokens in the upstream's usage


def _body(stream: bool) -> dict:
    return {"model": "tiny", "stream": stream, "max_tokens": 40, "messages": [{"role": "user", "content": "hi there"}]}


def _time_out(url: str, key: str) -> None:
    """A non-streamed request whose client gives up after 0.4 s."""
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            url + "/v1/chat/completions", headers={"authorization": f"Bearer {key}"}, json=_body(False), timeout=0.4
        )


def _leave_after_three_chunks(url: str, key: str) -> None:
    with httpx.stream(
        "POST", url + "/v1/chat/completions", headers={"authorization": f"Bearer {key}"}, json=_body(True), timeout=10
    ) as answer:
        for count, _ in enumerate(answer.iter_raw(), 1):
            if count == 3:
                break  # leaving the block closes the connection


@contextlib.contextmanager
def _gateway(upstream: SlowUpstream, tokenizer_dir: str) -> Iterator[tuple[str, Admin, str]]:
    """The gateway (on Redis) in front of `upstream`, its admin client and a tenant far from its limits."""
    with ThreadServer(upstream.app) as up, serve_gateway(gateway_config([up.url], tokenizer_dir, REDIS_URL)) as gw:
        admin = Admin(gw.url)
        yield gw.url, admin, admin.tenant(rpm=1000, input_tpm=1_000_000, output_tpm=1_000_000)


def test_a_non_streamed_request_whose_client_left_runs_to_its_end_and_is_charged_its_usage(tokenizer_dir, clean_redis):
    upstream = SlowUpstream(PIECES, delay_s=0.06)  # the whole answer after ~1.2 s, long after the client's 0.4 s
    with _gateway(upstream, tokenizer_dir) as (url, admin, tenant):
        _time_out(url, admin.key(tenant))
        wait_until(lambda: upstream.finished == 1)
        usage = wait_until(lambda: (u := admin.usage(tenant))["output_tokens"] and u)
        assert (usage["requests"], usage["input_tokens"], usage["output_tokens"]) == (1, 5, 20)
        assert upstream.cancelled == 0


def test_a_stream_whose_client_left_stops_and_is_charged_what_was_generated(tokenizer_dir, clean_redis):
    upstream = SlowUpstream(PIECES, delay_s=0.06)
    with _gateway(upstream, tokenizer_dir) as (url, admin, tenant):
        _leave_after_three_chunks(url, admin.key(tenant))
        wait_until(lambda: upstream.cancelled == 1)
        usage = wait_until(lambda: (u := admin.usage(tenant))["requests"] and u)
        assert 0 < usage["output_tokens"] < 20  # the delivered text's count: the stream was cut before its end
        assert upstream.finished == 0
