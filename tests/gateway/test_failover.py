"""A request that fails before its first byte goes on to every other healthy replica before the client is refused
(issue: a recovered or spare replica must take traffic at once)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.gateway.conftest import Admin, gateway_config, serve_gateway
from tests.gateway.servers import ThreadServer, free_port

CHAT = [{"role": "user", "content": "hello there"}]


def _always_failing() -> Starlette:
    async def refuse(request: Request) -> JSONResponse:
        error = {"error": {"message": "replica broken", "type": "server_error", "param": None, "code": None}}
        return JSONResponse(error, status_code=500)

    return Starlette(
        routes=[
            Route("/v1/chat/completions", refuse, methods=["POST"]),
            Route("/health", lambda r: JSONResponse({"ok": True}), methods=["GET"]),
        ]
    )


def test_a_request_tries_every_replica_before_it_is_refused(fake, tokenizer_dir):
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    with ThreadServer(_always_failing()) as broken:
        # the broken ones first: a router breaking ties by order tries them before the healthy one
        config = gateway_config([*dead, broken.url, fake.url], tokenizer_dir, debug_headers=True)
        # (the round-robin router has no probes to take them out first; it now refuses a `health` section)
        with serve_gateway(config) as gw:
            admin = Admin(gw.url)
            key = admin.key(admin.tenant())
            for i in range(4):
                response = admin.http.post(
                    gw.url + "/v1/chat/completions",
                    headers={"authorization": f"Bearer {key}"},
                    json={"model": "tiny", "messages": CHAT, "max_tokens": 1, "user": f"u{i}"},
                )
                assert response.status_code == 200, response.text
                assert response.headers["x-sluicegate-replica"].endswith(str(3))
    assert len(fake.received) == 4


def test_a_request_is_refused_with_the_last_replicas_error_when_none_can_take_it(tokenizer_dir):
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    with (
        ThreadServer(_always_failing()) as broken,
        serve_gateway(gateway_config([*dead, broken.url], tokenizer_dir)) as gw,
    ):
        admin = Admin(gw.url)
        key = admin.key(admin.tenant())
        response = admin.http.post(
            gw.url + "/v1/chat/completions",
            headers={"authorization": f"Bearer {key}"},
            json={"model": "tiny", "messages": CHAT, "max_tokens": 1},
        )
        assert response.status_code == 502
        assert response.json()["error"]["code"] == "upstream_error"
