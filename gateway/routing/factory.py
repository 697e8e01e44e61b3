"""`build_router`: the gateway's Router from the `models:` section of its YAML.

    models:
      tiny-llama:                       # the model name clients send
        replicas:
          - name: r0                    # stable name: metrics label, admin API key, debug header
            url: http://127.0.0.1:8100  # base URL (no /v1)
            role: both                  # prefill | decode | both (its --kv-role); prefill replicas split the model
          - name: ext
            url: http://10.0.0.9:8000
            kv_events: false            # no /v1/kv/events feed (e.g. vLLM): the router's own history stands in
        routing:                        # optional; defaults shown
          policy: expected_ttft         # round_robin | least_loaded | consistent_hash | prefix_affinity | expected_ttft
                                        # | sglang_cache_aware (SGLang router's rule, to compare with)
          hit_weight: 4                 # expected_ttft: cost = queued prefill + uncached - hit_weight * cached tokens
          kv_events: true               # default for replicas that do not say
          max_load_ratio: 1.25          # load bound: in-flight <= ceil(ratio * (total + 1) / n) + slack
          max_load_slack_requests: 8
          load_weight: 0.02             # prefix_affinity score: saved tokens - load_weight * load tokens
          decode_token_weight: 0.1      #   load tokens per in-flight output token
          waiting_request_tokens: 512   #   load tokens per request in the replica's queue (vllm:num_requests_waiting)
          kv_usage_tokens: 2048         #   load tokens at 100% KV usage (vllm:kv_cache_usage_perc)
          hash_key_blocks: 4            # consistent_hash: key = hash of the first 4 blocks
          virtual_nodes: 64             # consistent_hash: ring points per replica
        health:                         # optional
          interval_s: 2.0               # GET /health and /metrics period
          timeout_s: 1.0
          unhealthy_after: 2            # failed probes in a row -> down
          healthy_after: 1              # good probes in a row -> up
          breaker_failures: 3           # failed requests in a row -> breaker open
          breaker_open_s: 5.0           # open this long, then one trial request (doubling up to 8x on failure)
        index:                          # optional
          block_size: 16                # tokens per block of the request path's hashes
          chars_per_block: 64           # character hashing when the tokenizer is unknown
          history_ttl_s: 300            # approximate index entry lifetime (replicas without a feed)
          history_max_blocks: 1000000   # approximate index size bound
          resync_backoff_s: 0.5         # KV feed reconnect delay, doubling to 10 s

The policy knobs are explained in gateway/routing/policies/expected_ttft.py and prefix_affinity.py; config.py
validates every field and names the value and the fix when one is wrong. A model with `role: prefill` replicas is
served in two hops (docs/architecture.md, "Disaggregated prefill and decode"): the prefill hop by the model's
policy among its prefill replicas, the decode hop by load and free KV among its decode replicas
(policies/decode_load.py), `both` replicas taking the requests one replica serves whole (n > 1, embeddings) and the
decode hops no decode replica can take (model_router.py, STAGE_TIERS).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from gateway.routing.base import Router
from gateway.routing.config import parse_models_config
from gateway.routing.router import PrefixRouter


def build_router(models_config: dict[str, Any], *, metrics_registry: CollectorRegistry | None = None) -> Router:
    """Raises RoutingConfigError (a ValueError) naming the bad value; nothing starts until `await router.start()`."""
    return PrefixRouter(parse_models_config(models_config), metrics_registry)
