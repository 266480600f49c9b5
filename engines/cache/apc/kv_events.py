"""The apc cache's changes in the terms vLLM publishes them: BlockStored, BlockRemoved, AllBlocksCleared.

vLLM's BlockPool (vllm/v1/core/block_pool.py, 0.32-0.33) queues one `BlockStored` per call that
caches new full blocks (their hashes, the hash of the block before the first of them or None, their
token ids, the block size, the LoRA name), one `BlockRemoved` per cached block it evicts, and one
`AllBlocksCleared` per prefix-cache reset; the engine publishes the queue after each step. The
apc cache keeps the same log when asked (`KvEventLog`, off by default: no cost to a run that does
not publish). A published hash is the low 64 bits of the block hash read as a big-endian integer
(vLLM's `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES` default), which `external_hash` computes from a map
key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_MASK64 = (1 << 64) - 1
GROUP_ID_BYTES = 4  # a map key is the block hash followed by the KV-cache group id


def external_hash(key: bytes, group_id_bytes: int = GROUP_ID_BYTES) -> int:
    """The 64-bit hash vLLM publishes for an apc map key (block hash + group id)."""
    return int.from_bytes(key[:-group_id_bytes], "big") & _MASK64


@dataclass(frozen=True)
class BlockStored:
    block_hashes: tuple[int, ...]
    parent_block_hash: int | None  # the block before the first stored one (None: the first)
    token_ids: tuple[int, ...]  # every stored block's tokens, in order
    block_size: int
    lora_name: str | None = None


@dataclass(frozen=True)
class BlockRemoved:
    block_hashes: tuple[int, ...]


@dataclass(frozen=True)
class AllBlocksCleared:
    pass


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass
class KvEventLog:
    """The cache's changes since the last `take`, in the order the cache made them."""

    events: list[KvEvent] = field(default_factory=list)

    def append(self, event: KvEvent) -> None:
        self.events.append(event)

    def take(self) -> list[KvEvent]:
        out, self.events = self.events, []
        return out
