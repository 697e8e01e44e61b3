"""A replica's 4xx reaches the client as the replica wrote it: status, message, code and the parameter at fault."""

from __future__ import annotations

import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.gateway.conftest import Admin, gateway_config, serve_gateway
from tests.gateway.servers import ThreadServer


def _refusing_replica() -> Starlette:
    async def refuse(request: Request) -> JSONResponse:
        error = {
            "message": "response_format.json_schema: not a valid JSON schema",
            "type": "invalid_request_error",
            "param": "response_format",
            "code": "invalid_schema",
        }
        return JSONResponse({"error": error}, status_code=400)

    return Starlette(routes=[Route("/v1/chat/completions", refuse, methods=["POST"])])


def test_a_replica_400_keeps_its_param_and_code(tokenizer_dir):
    with (
        ThreadServer(_refusing_replica()) as replica,
        serve_gateway(gateway_config([replica.url], tokenizer_dir)) as gw,
    ):
        admin = Admin(gw.url)
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=admin.key(admin.tenant()), max_retries=0)
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    error = raised.value.body
    assert raised.value.status_code == 400
    assert error["param"] == "response_format" and error["code"] == "invalid_schema"
    assert "not a valid JSON schema" in error["message"]
