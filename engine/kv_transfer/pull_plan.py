"""Decode side: the local blocks a remote prefill's KV is read into, planned on the engine thread before the read.

    prompt blocks   [ 0 | 1 | 2 | 3 | 4 | 5 ]  tail: computed here
    remote handoff  [ 0 | 1 | 2 | 3 ]
    already cached  [ 0 | 1 ]                   held (a reference each) so nothing evicts them meanwhile
    read            [         2 | 3 ]           fresh blocks, owned by the plan until the request takes them

Once the read is done, the read blocks are registered in the prefix cache under this replica's own hashes of the
prompt; the request then finds blocks 0-3 as an ordinary prefix hit when it is scheduled, and the plan's
references are dropped. Nothing else in the engine knows a transfer happened.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.block_pool import KVBlock


@dataclass
class PullPlan:
    first_block: int  # prompt block index of read_blocks[0]: the blocks before it are cached here already
    read_blocks: list[KVBlock]  # fresh local blocks the remote blocks go into
    hashes: list[int]  # the prefix-cache hashes of read_blocks (this replica's chain over the prompt)
    token_chunks: list[tuple[int, ...]]  # the prompt tokens of each read block
    held: list[KVBlock]  # every block the plan holds a reference on: the cached ones, then read_blocks

    @property
    def num_blocks(self) -> int:
        return self.first_block + len(self.read_blocks)

    @property
    def read_block_ids(self) -> list[int]:
        return [block.block_id for block in self.read_blocks]
