"""An output guardrail that blocks mid-stream ends the client's stream at once and cancels the upstream's work; the
tenant is charged the prompt and what was generated up to the block, not the whole answer it never saw."""

from __future__ import annotations

import httpx

from tests.gateway.conftest import Admin, gateway_config, serve_gateway, wait_until
from tests.gateway.servers import ThreadServer
from tests.gateway.slow_upstream import SlowUpstream

GUARDRAILS = {"engine": {}, "policies": {"strict": {"output_pii_action": "block"}}}
PIECES = ["Write to ", "li.chen@example.com", " now."] + ["word "] * 40


def test_output_block_cuts_the_upstream_and_charges_only_what_was_generated():
    upstream = SlowUpstream(PIECES, delay_s=0.02)
    with (
        ThreadServer(upstream.app) as server,
        serve_gateway(gateway_config([server.url], None, guardrails=GUARDRAILS)) as gw,
    ):
        admin = Admin(gw.url)
        tenant = admin.tenant(guardrails="strict")
        key = admin.key(tenant)
        with httpx.stream(
            "POST",
            gw.url + "/v1/chat/completions",
            timeout=20,
            headers={"authorization": f"Bearer {key}"},
            json={"model": "tiny", "stream": True, "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]},
        ) as response:
            lines = list(response.iter_lines())
        assert any("content_policy_violation" in line for line in lines)
        assert not any("word" in line for line in lines)
        usage = wait_until(lambda: admin.usage(tenant).get("requests") and admin.usage(tenant))
        wait_until(lambda: upstream.cancelled == 1)
        assert upstream.finished == 0
        assert 0 < usage["output_tokens"] < len(PIECES)
        metrics = httpx.get(gw.url + "/metrics").text
        assert "mid_stream" not in metrics  # the replica did nothing wrong
