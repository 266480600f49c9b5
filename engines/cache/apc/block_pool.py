"""vLLM V1's BlockPool (docs/apc.md §2.4, §3): free queue, cached-block map, lazy eviction.

Free-queue profiles (§0, §3 "free_blocks order rules"): `classic` appends every freed block to the
tail; `v024` prepends hashless freed blocks (reused first) and appends hashed ones. Freeing never
clears hashes: a freed hashed block stays hittable until `get_new_blocks` pops (evicts) it. The
profiles are registered in engines/vllm_profile.py (vLLM's scheduler reads them too).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from engines.cache.apc import pool_loops
from engines.cache.apc.block import FreeKVCacheBlockQueue, KVCacheBlock
from engines.cache.apc.kv_events import AllBlocksCleared, BlockRemoved, KvEventLog, external_hash
from engines.cache.apc.pool_loops import Entries, Entry, PoolLoops
from engines.cache.apc.undo import PoolJournal
from engines.vllm_profile import FREE_ORDERS, FreeOrder

__all__ = ["FREE_ORDERS", "BlockHashToBlockMap", "BlockPool", "FreeOrder"]

logger = logging.getLogger(__name__)


class BlockHashToBlockMap:
    """key -> one block, or {block_id: block} once a second block arrives under the same key.
    No de-duplication; lookups return the first inserted block (§2.4)."""

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: dict[bytes, KVCacheBlock | dict[int, KVCacheBlock]] = {}

    @property
    def entries(self) -> Entries:
        """The dict itself, for the pool's loops (pool_loops.py), which keep the forms above."""
        return self._cache

    def get_one_block(self, key: bytes) -> KVCacheBlock | None:
        entry = self._cache.get(key)
        if entry is None or not isinstance(entry, dict):
            return entry
        return next(iter(entry.values()))

    def get_all_blocks(self, key: bytes) -> list[KVCacheBlock]:
        entry = self._cache.get(key)
        if entry is None:
            return []
        return list(entry.values()) if isinstance(entry, dict) else [entry]

    def insert(self, key: bytes, block: KVCacheBlock) -> None:
        entry = self._cache.setdefault(key, block)
        if entry is not block:
            self.add_duplicate(key, entry, block)

    def add_duplicate(self, key: bytes, entry: Entry, block: KVCacheBlock) -> None:
        """`block` joins `entry`, what `key` maps to already (one block or the duplicates)."""
        if isinstance(entry, dict):
            entry[block.block_id] = block
        else:
            self._cache[key] = {entry.block_id: entry, block.block_id: block}

    def pop(self, key: bytes, block_id: int) -> KVCacheBlock | None:
        """Remove only `block_id` under `key`; None if it is not there."""
        entry = self._cache.get(key)
        if entry is None:
            return None
        if not isinstance(entry, dict):
            if entry.block_id != block_id:
                return None
            del self._cache[key]
            return entry
        block = entry.pop(block_id, None)
        if len(entry) == 1:
            self._cache[key] = next(iter(entry.values()))
        elif not entry:
            del self._cache[key]
        return block

    def keys(self) -> list[bytes]:
        return list(self._cache)

    def num_blocks(self) -> int:
        """Cached blocks, duplicates included."""
        return sum(len(e) if e.__class__ is dict else 1 for e in self._cache.values())

    def __len__(self) -> int:
        return len(self._cache)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._cache)

    def __contains__(self, key: object) -> bool:
        return key in self._cache


class BlockPool:
    """Owns every block; block 0 is the null block and is never handed out (§2.2). The hot
    loops are `loops` (pool_loops.py: C where built, else Python); the pool keeps the counts."""

    def __init__(
        self,
        num_gpu_blocks: int,
        enable_caching: bool,
        free_order: str = "v024",
        loops: PoolLoops | None = None,
    ) -> None:
        if num_gpu_blocks < 1:
            raise ValueError(f"num_gpu_blocks must be >= 1, got {num_gpu_blocks}")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.free_order = free_order
        order = FREE_ORDERS.get(free_order)
        # v024 with caching on: hashless freed blocks go to the head; caching off: all of them
        self._prepend_hashless = (
            order.prepend_unhashed if enable_caching else order.prepend_when_disabled
        )
        self.loops = loops or pool_loops.default_loops()
        block_type = self.loops.block_type
        self.blocks = [block_type(i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks, block_type)
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        self.num_evictions = 0  # cached blocks evicted (lazily, by get_new_blocks)
        self.num_free_cached = 0  # hashed blocks in the free queue (evictable)
        # vLLM's KV-cache events (kv_events.py): None unless a server publishes them
        self.events: KvEventLog | None = None
        # what each change overwrites, while a trial step runs (undo.py); None otherwise
        self.journal: PoolJournal | None = None

    # ---- lookup and caching ------------------------------------------------------------------
    def get_cached_block(self, key: bytes) -> KVCacheBlock | None:
        return self.cached_block_hash_to_block.get_one_block(key)

    def hit_run(self, keys: list[bytes], max_blocks: int) -> list[KVCacheBlock]:
        """Blocks cached under the leading keys, up to the first miss or `max_blocks` (§4.1)."""
        return self.loops.hit_run(keys, max_blocks, self.cached_block_hash_to_block.entries)

    def cache_full_blocks(
        self,
        keys: list[bytes],
        blocks: list[KVCacheBlock],
        num_cached_blocks: int,
        num_full_blocks: int,
        provenances: list[tuple[Any, ...]] | None = None,
    ) -> None:
        """Give blocks[num_cached:num_full] their keys and insert them into the map; a key
        cached already keeps both blocks, the first one answering lookups.
        `provenances`: what verify_tokens_on_hit compares on a hit, one per new block."""
        if num_cached_blocks >= num_full_blocks:
            return
        assert len(keys) >= num_full_blocks, "block hashes lag behind the blocks to cache"
        if self.journal is not None:
            self.journal.note_cache(keys, blocks, num_cached_blocks, num_full_blocks)
        if provenances is not None:
            for blk, prov in zip(blocks[num_cached_blocks:num_full_blocks], provenances):
                blk.provenance = prov
        cached = self.cached_block_hash_to_block
        self.loops.cache_run(
            keys, blocks, num_cached_blocks, num_full_blocks, cached.entries, cached.add_duplicate
        )

    # ---- allocation ------------------------------------------------------------------------
    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Pop `num_blocks` from the queue head, evicting cached ones lazily; each gets ref 1."""
        queue = self.free_block_queue
        if num_blocks > queue.num_free_blocks:
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        if num_blocks == 0:
            return []
        if self.events is not None:
            self._log_evictions(num_blocks)
        if self.journal is not None:
            self.journal.note_pop(num_blocks)
        cached = self.cached_block_hash_to_block
        out, num_evicted = self.loops.pop_free(
            queue.fake_free_list_head, num_blocks, cached.entries, cached.pop
        )
        queue.num_free_blocks -= num_blocks
        self.num_free_cached -= num_evicted
        self.num_evictions += num_evicted
        return out

    def _log_evictions(self, num_blocks: int) -> None:
        """One BlockRemoved per hashed block among the `num_blocks` the queue head gives up:
        each is evicted from the map as it is popped (vLLM's _maybe_evict_cached_block)."""
        assert self.events is not None
        blk = self.free_block_queue.fake_free_list_head.next_free_block
        for _ in range(num_blocks):
            if blk.block_hash is not None:
                self.events.append(BlockRemoved((external_hash(blk.block_hash),)))
            blk = blk.next_free_block

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take a reference on hit blocks; a free one leaves the queue (§3)."""
        if self.journal is not None:
            blocks = list(blocks)
            self.journal.note_touch(blocks)
        num_removed, num_hashed = self.loops.take_free(blocks)
        self.free_block_queue.num_free_blocks -= num_removed
        self.num_free_cached -= num_hashed

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference each; blocks reaching 0 re-enter the queue, first element evicted
        first, per the profile rule: at the tail, or (v024) hashless ones at the head."""
        queue = self.free_block_queue
        if self.journal is not None:
            ordered_blocks = list(ordered_blocks)
            self.journal.note_free(ordered_blocks)
        num_freed, num_hashed = self.loops.link_free(
            queue.fake_free_list_head,
            queue.fake_free_list_tail,
            ordered_blocks,
            self._prepend_hashless,
        )
        queue.num_free_blocks += num_freed
        self.num_free_cached += num_hashed

    def start_journal(self) -> PoolJournal:
        """Keep what every change overwrites until `rollback_journal` (undo.py)."""
        self.journal = PoolJournal(self)
        return self.journal

    def rollback_journal(self) -> None:
        """Undo every change since `start_journal`, and stop keeping them."""
        if self.journal is None:
            raise RuntimeError("rollback_journal() without start_journal()")
        journal, self.journal = self.journal, None
        journal.rollback()

    # ---- maintenance -------------------------------------------------------------------------
    def reset_prefix_cache(self) -> bool:
        num_used = self.num_gpu_blocks - self.get_num_free_blocks()
        if num_used != 1:
            logger.warning(
                "Failed to reset prefix cache because some blocks (%d) are not freed yet",
                num_used - 1,
            )
            return False
        if self.journal is not None:
            self.journal.note_everything()
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        for blk in self.blocks:
            blk.reset_hash()
        self.num_free_cached = 0
        if self.events is not None:
            self.events.append(AllBlocksCleared())
        return True

    def get_usage(self) -> float:
        total = self.num_gpu_blocks - 1
        if total <= 0:
            return 0.0
        return 1.0 - self.get_num_free_blocks() / total
