"""Prefill side: the blocks of finished prefill requests, held (one reference each) until a decode replica has read
them, or until their deadline if none does (the decode replica died, or the gateway fell back to another path).

Owned by the engine thread, like the block pool whose references it takes.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.block_pool import BlockPool, KVBlock


@dataclass
class _Held:
    blocks: list[KVBlock]
    deadline_s: float  # time.monotonic()


class Handoffs:
    def __init__(self, pool: BlockPool, timeout_s: float) -> None:
        self.pool = pool
        self.timeout_s = timeout_s
        self._held: dict[str, _Held] = {}  # insertion order is deadline order: one timeout for all

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, request_id: str, blocks: list[KVBlock], now_s: float) -> None:
        self.pool.touch(blocks)
        self._held[request_id] = _Held(blocks, now_s + self.timeout_s)

    def release(self, request_id: str) -> bool:
        """The decode replica read them (or needed none): free the blocks. False for an unknown or expired id."""
        held = self._held.pop(request_id, None)
        if held is None:
            return False
        self.pool.free(reversed(held.blocks))  # tail first, as sequences free theirs
        return True

    def expire(self, now_s: float) -> int:
        """Free the holds past their deadline; how many there were."""
        expired = 0
        for request_id, held in list(self._held.items()):
            if held.deadline_s > now_s:
                break
            del self._held[request_id]
            self.pool.free(reversed(held.blocks))
            expired += 1
        return expired
