"""Server settings (the HTTP side of a replica; the engine's own are engine.config.EngineConfig)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    """Address to listen on; 0.0.0.0 to serve other machines."""
    port: int = 8100
    max_waiting_requests: int = 256
    """Requests allowed to wait once free batch seats (max_num_seqs) are taken; beyond it new requests get 503 with
    Retry-After."""
    retry_after_s: int = 1
    """Retry-After sent with a 503 when the waiting queue is full or the replica is draining."""
    max_request_body_bytes: int = 8 << 20
    """Larger bodies get 413 before they are parsed."""
    drain_timeout_s: float = 30.0
    """On SIGTERM: stop admitting, let in-flight requests finish for up to this long, end the rest, then exit."""
    log_level: str = "info"

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise ValueError(f"port={self.port}: use 0..65535 (0 picks a free port)")
        if self.max_waiting_requests < 1:
            raise ValueError(f"max_waiting_requests={self.max_waiting_requests}: must be at least 1")
        if self.retry_after_s < 0:
            raise ValueError(f"retry_after_s={self.retry_after_s}: must be >= 0")
        if self.max_request_body_bytes < 1024:
            raise ValueError(f"max_request_body_bytes={self.max_request_body_bytes}: use at least 1024")
        if self.drain_timeout_s < 0:
            raise ValueError(f"drain_timeout_s={self.drain_timeout_s}: must be >= 0")
