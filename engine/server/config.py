"""Server settings (the HTTP side of a replica; the engine's own are engine.config.EngineConfig)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sluicegate.schema import Host, Schema


class ServerConfig(Schema):
    host: Host = "127.0.0.1"
    """Address to listen on; 0.0.0.0 to serve other machines."""
    port: Annotated[int, Field(ge=0, le=65535)] = 8100
    """TCP port to listen on (0 picks a free one)."""
    max_waiting_requests: Annotated[int, Field(ge=1)] = 256
    """Requests allowed to wait once free batch seats (max_num_seqs) are taken; beyond it new requests get 503 with
    Retry-After."""
    retry_after_s: Annotated[int, Field(ge=0)] = 1
    """Retry-After sent with a 503 when the waiting queue is full or the replica is draining."""
    max_request_body_bytes: Annotated[int, Field(ge=1024)] = 8 << 20
    """Larger bodies get 413 before they are parsed."""
    drain_timeout_s: Annotated[float, Field(ge=0.0)] = 30.0
    """On SIGTERM: stop admitting, let in-flight requests finish for up to this long, end the rest, then exit."""
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    """uvicorn's and the engine's log level (the request log is written at any level)."""
    request_log: bool = True
    """One JSON line per generation request on stdout (logger `sluicegate.engine.requests`): status, tokens,
    timings, never text."""
    embedding_pooling: Literal["last", "mean"] = "last"
    """How /v1/embeddings pools the prompt's final hidden states: the last token's (decoder-only embedding models,
    and exact under prefix caching) or the mean over every token (such requests skip prefix-cache hits)."""
    kv_transfer_host: Host | None = None
    """Prefill replicas (--kv-role prefill): the host decode replicas reach this one on, in the kv_transfer_params
    it answers with. None: the address the request came in on (what the gateway reached)."""
    kv_transfer_read_timeout_s: Annotated[float, Field(gt=0)] = 10.0
    """Decode replicas: a KV read not done by then is given up; the request computes its prompt here."""
    tool_call_parser: Literal["llama3_json", "hermes", "mistral"] | None = None
    """How this model writes tool calls (docs/api.md, "Tool calling"): needed for tool_choice auto, required or a
    named function; without it a request with tools may only use tool_choice none."""
