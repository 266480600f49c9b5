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

from collections.abc import Sequence
from dataclasses import dataclass, field

from engines.cache.apc.hashing import (
    RequestBlockHashes,
    RequestHasher,
    get_hash_fn_by_name,
    init_none_hash,
)
from engines.cache.records import AllBlocksCleared, BlockRemoved, BlockStored, KvEvent

# The records live in engines/cache/records.py (the KvEventSource capability names no design);
# re-exported here, where the apc code that makes them has always found them.
__all__ = [
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "KvEvent",
    "KvEventLog",
    "external_hash",
    "hashes_by",
    "published_hashes",
]

_MASK64 = (1 << 64) - 1
GROUP_ID_BYTES = 4  # a map key is the block hash followed by the KV-cache group id


def external_hash(key: bytes, group_id_bytes: int = GROUP_ID_BYTES) -> int:
    """The 64-bit hash vLLM publishes for an apc map key (block hash + group id)."""
    return int.from_bytes(key[:-group_id_bytes], "big") & _MASK64


def published_hashes(
    prompt_ids: Sequence[int],
    block_size: int,
    hash_algo: str = "sha256",
    lora_id: str | None = None,
    salt: str | None = None,
) -> list[int]:
    """The hashes vLLM publishes for a prompt's full blocks: the apc cache's own keys (its
    chained hash with NONE_HASH's default seed), as `external_hash` turns them into integers."""
    hasher = RequestHasher(get_hash_fn_by_name(hash_algo), init_none_hash(hash_algo), block_size)
    return hashes_by(hasher, prompt_ids, lora_id, salt)


def hashes_by(
    hasher: RequestHasher, token_ids: Sequence[int], lora_id: str | None, salt: str | None
) -> list[int]:
    """`published_hashes` under a given hasher (a cache's own, with its NONE_HASH)."""
    memo = RequestBlockHashes(None, lora_id, salt)
    return [external_hash(k) for k in hasher.extend(memo, token_ids)]


@dataclass
class KvEventLog:
    """The cache's changes since the last `take`, in the order the cache made them."""

    events: list[KvEvent] = field(default_factory=list)

    def append(self, event: KvEvent) -> None:
        self.events.append(event)

    def take(self) -> list[KvEvent]:
        out, self.events = self.events, []
        return out
