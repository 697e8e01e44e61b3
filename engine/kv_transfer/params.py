"""`kv_transfer_params`, the request and response field of disaggregated serving (docs/architecture.md,
"Disaggregated prefill and decode"), in vLLM's field names so vLLM's proxies and our gateway speak the same thing.

A prefill request carries `{"do_remote_decode": true}`; its response carries what a decode replica needs to pull the
prompt's blocks (`RemotePrefill.to_json`); the decode request carries that object back unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.errors import RequestError

PARAM = "kv_transfer_params"


@dataclass(frozen=True)
class Handoff:
    """What a finished prefill request left pinned for a decode replica: its prompt's leading full blocks."""

    block_ids: tuple[int, ...]
    num_tokens: int  # len(block_ids) * block_size: prompt tokens whose KV the blocks hold
    prefix_hash: int  # the block hash chain's value at the last handed block (sluicegate/block_hash.py)


@dataclass(frozen=True)
class RemotePrefill:
    """A decode request's pointer to the KV a prefill replica holds for it."""

    engine_id: str
    host: str
    port: int
    block_ids: tuple[int, ...]
    request_id: str
    num_tokens: int
    prefix_hash: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 literal
        return f"http://{host}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_engine_id": self.engine_id,
            "remote_host": self.host,
            "remote_port": self.port,
            "remote_block_ids": list(self.block_ids),
            "remote_request_id": self.request_id,
            "remote_num_tokens": self.num_tokens,
            "remote_prefix_hash": f"{self.prefix_hash:016x}",
        }


@dataclass(frozen=True)
class KVTransferRequest:
    """A request's `kv_transfer_params`, parsed: a prefill to hand off, or a decode to pull for (not both)."""

    remote_decode: bool = False
    remote_prefill: RemotePrefill | None = None


def parse(value: Any) -> KVTransferRequest | None:
    """The request field (absent or null: None). Raises RequestError naming what is wrong."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RequestError(f"{PARAM} must be an object", param=PARAM)
    remote_decode, remote_prefill = value.get("do_remote_decode"), value.get("do_remote_prefill")
    for name, flag in (("do_remote_decode", remote_decode), ("do_remote_prefill", remote_prefill)):
        if flag is not None and not isinstance(flag, bool):
            raise RequestError(f"{PARAM}.{name} must be a boolean", param=f"{PARAM}.{name}")
    if remote_decode and remote_prefill:
        raise RequestError(f"{PARAM}: do_remote_decode and do_remote_prefill exclude each other", param=PARAM)
    if remote_prefill:
        return KVTransferRequest(remote_prefill=_remote_prefill(value))
    return KVTransferRequest(remote_decode=bool(remote_decode))


def _remote_prefill(value: dict[str, Any]) -> RemotePrefill:
    def field(name: str, kind: type) -> Any:
        item = value.get(name)
        if not isinstance(item, kind) or isinstance(item, bool):
            raise RequestError(f"{PARAM}.{name} must be a {kind.__name__}", param=f"{PARAM}.{name}")
        return item

    block_ids = field("remote_block_ids", list)
    if not all(isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in block_ids):
        raise RequestError(f"{PARAM}.remote_block_ids must hold block ids (integers >= 0)", param=PARAM)
    port = field("remote_port", int)
    if not 0 < port < 65536:
        raise RequestError(f"{PARAM}.remote_port must be a TCP port", param=f"{PARAM}.remote_port")
    num_tokens = field("remote_num_tokens", int)
    try:
        prefix_hash = int(field("remote_prefix_hash", str), 16)
    except ValueError:
        raise RequestError(f"{PARAM}.remote_prefix_hash must be hexadecimal", param=PARAM) from None
    return RemotePrefill(
        engine_id=field("remote_engine_id", str),
        host=field("remote_host", str),
        port=port,
        block_ids=tuple(block_ids),
        request_id=field("remote_request_id", str),
        num_tokens=num_tokens,
        prefix_hash=prefix_hash,
    )
