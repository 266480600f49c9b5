"""vLLM V1's BlockPool (docs/apc.md §2.4, §3): free queue, cached-block map, lazy eviction.

Free-queue profiles (§0, §3 "free_blocks order rules"): `classic` appends every freed block to the
tail; `v024` prepends hashless freed blocks (reused first) and appends hashed ones. Freeing never
clears hashes: a freed hashed block stays hittable until `get_new_blocks` pops (evicts) it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from engines.cache.apc.block import FreeKVCacheBlockQueue, KVCacheBlock
from engines.registry import Registry

logger = logging.getLogger(__name__)


class FreeOrder(NamedTuple):
    """One free-queue profile and the option defaults that follow it (§0 table)."""

    prepend_unhashed: bool  # caching on: hashless freed blocks go to the head
    prepend_when_disabled: bool  # caching off: where every freed block goes
    reserve_full_prompt: bool
    async_scheduling: bool


FREE_ORDERS: Registry[FreeOrder] = Registry("free_order")
FREE_ORDERS.add("classic", FreeOrder(False, False, False, False))
FREE_ORDERS.add("v024", FreeOrder(True, True, True, True))


class BlockHashToBlockMap:
    """key -> one block, or {block_id: block} once a second block arrives under the same key.
    No de-duplication; lookups return the first inserted block (§2.4)."""

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: dict[bytes, KVCacheBlock | dict[int, KVCacheBlock]] = {}

    def get_one_block(self, key: bytes) -> KVCacheBlock | None:
        entry = self._cache.get(key)
        if entry is None or entry.__class__ is KVCacheBlock:
            return entry
        return next(iter(entry.values()))

    def get_all_blocks(self, key: bytes) -> list[KVCacheBlock]:
        entry = self._cache.get(key)
        if entry is None:
            return []
        return [entry] if entry.__class__ is KVCacheBlock else list(entry.values())

    def insert(self, key: bytes, block: KVCacheBlock) -> None:
        entry = self._cache.setdefault(key, block)
        if entry is not block:
            self._add_duplicate(key, entry, block)

    def _add_duplicate(self, key: bytes, entry, block: KVCacheBlock) -> None:
        if entry.__class__ is KVCacheBlock:
            self._cache[key] = {entry.block_id: entry, block.block_id: block}
        else:
            entry[block.block_id] = block

    def pop(self, key: bytes, block_id: int) -> KVCacheBlock | None:
        """Remove only `block_id` under `key`; None if it is not there."""
        entry = self._cache.get(key)
        if entry is None:
            return None
        if entry.__class__ is KVCacheBlock:
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
        return sum(1 if e.__class__ is KVCacheBlock else len(e) for e in self._cache.values())

    def __len__(self) -> int:
        return len(self._cache)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._cache)

    def __contains__(self, key: object) -> bool:
        return key in self._cache


class BlockPool:
    """Owns every block; block 0 is the null block and is never handed out (§2.2)."""

    def __init__(self, num_gpu_blocks: int, enable_caching: bool, free_order: str = "v024") -> None:
        if num_gpu_blocks < 1:
            raise ValueError(f"num_gpu_blocks must be >= 1, got {num_gpu_blocks}")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.free_order = free_order
        order = FREE_ORDERS.get(free_order)
        self._prepend_unhashed = order.prepend_unhashed
        self._prepend_all = not enable_caching and order.prepend_when_disabled
        self.blocks = [KVCacheBlock(i) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        self.num_evictions = 0  # cached blocks evicted (lazily, by get_new_blocks)
        self.num_free_cached = 0  # hashed blocks in the free queue (evictable)

    # ---- lookup and caching ------------------------------------------------------------------
    def get_cached_block(self, key: bytes) -> KVCacheBlock | None:
        return self.cached_block_hash_to_block.get_one_block(key)

    def cache_full_blocks(
        self,
        keys: list[bytes],
        blocks: list[KVCacheBlock],
        num_cached_blocks: int,
        num_full_blocks: int,
        provenances: list[tuple] | None = None,
    ) -> None:
        """Give blocks[num_cached:num_full] their keys and insert them into the map.
        `provenances`: what verify_tokens_on_hit compares on a hit, one per new block."""
        if num_cached_blocks >= num_full_blocks:
            return
        assert len(keys) >= num_full_blocks, "block hashes lag behind the blocks to cache"
        new_keys = keys[num_cached_blocks:num_full_blocks]
        new_blocks = blocks[num_cached_blocks:num_full_blocks]
        if provenances is not None:
            for blk, prov in zip(new_blocks, provenances):
                blk.provenance = prov
        cached = self.cached_block_hash_to_block
        setdefault = cached._cache.setdefault
        # Upstream's setter asserts the hash was None. Here blocks past num_cached are fresh
        # from get_new_blocks by construction, and check_integrity catches a re-keyed block
        # (its old map entry would point at a foreign key), so the hot loop only assigns.
        for blk, key in zip(new_blocks, new_keys):
            blk.block_hash = key
            entry = setdefault(key, blk)
            if entry is not blk:  # same content cached already: keep both, first one wins
                cached._add_duplicate(key, entry, blk)

    # ---- allocation ------------------------------------------------------------------------
    def get_num_free_blocks(self) -> int:
        return self.free_block_queue.num_free_blocks

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Pop `num_blocks` from the queue head, evicting cached ones lazily; each gets ref 1.

        This is popleft_n fused with the eviction and ref-count loop: one pass, no calls per
        block in the common case (a block cached under a key of its own)."""
        queue = self.free_block_queue
        if num_blocks > queue.num_free_blocks:
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        if num_blocks == 0:
            return []
        cached = self.cached_block_hash_to_block
        entries = cached._cache
        head = queue.fake_free_list_head
        out = []
        append = out.append
        num_dup_evicted = 0
        num_keys_before = len(entries)
        blk = head.next_free_block
        for _ in range(num_blocks):
            key = blk.block_hash
            if key is not None:  # lazy eviction; stale provenance is harmless (read only via map)
                entry = entries.pop(key)
                if entry is not blk:  # duplicates under this key: remove only this block id
                    entries[key] = entry
                    cached.pop(key, blk.block_id)
                    num_dup_evicted += 1
                blk.block_hash = None
            # ref_cnt is 0 for every queued block (check_integrity verifies it)
            blk.ref_cnt = 1
            blk.prev_free_block = None
            append(blk)
            nxt = blk.next_free_block
            blk.next_free_block = None
            blk = nxt
        head.next_free_block = blk
        blk.prev_free_block = head
        queue.num_free_blocks -= num_blocks
        # Keys that vanished plus duplicates evicted: one per block whose hash was cleared.
        num_evicted = num_keys_before - len(entries) + num_dup_evicted
        self.num_free_cached -= num_evicted
        self.num_evictions += num_evicted
        return out

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take a reference on hit blocks; a free one leaves the queue (§3)."""
        queue = self.free_block_queue
        num_removed = num_hashed = 0
        for blk in blocks:
            if blk.ref_cnt == 0:
                if blk.is_null:
                    continue
                prev, nxt = blk.prev_free_block, blk.next_free_block  # queue.remove, inlined
                if prev is None or nxt is None:
                    raise RuntimeError(f"touch: block {blk.block_id} has ref 0 but is not free")
                prev.next_free_block = nxt
                nxt.prev_free_block = prev
                blk.prev_free_block = blk.next_free_block = None
                num_removed += 1
                if blk.block_hash is not None:
                    num_hashed += 1
            elif blk.is_null:
                continue
            blk.ref_cnt += 1
        queue.num_free_blocks -= num_removed
        self.num_free_cached -= num_hashed

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference each; blocks reaching 0 re-enter the queue, first element evicted
        first, per the profile rule. One pass links tail-bound blocks as it goes; hashless ones
        (v024: head-bound) are collected and prepended at the end, keeping their order."""
        queue = self.free_block_queue
        tail = queue.fake_free_list_tail
        prev = tail.prev_free_block
        to_head = []
        num_tail = num_hashed = 0
        split = self._prepend_unhashed and self.enable_caching
        prepend_all = self._prepend_all
        for blk in ordered_blocks:
            # The null block's ref_cnt is not maintained (§2.2): it goes negative, never to 0,
            # so it never re-enters the queue.
            blk.ref_cnt -= 1
            if blk.ref_cnt:
                continue
            if blk.block_hash is not None:
                num_hashed += 1
            elif split or prepend_all:
                to_head.append(blk)
                continue
            prev.next_free_block = blk
            blk.prev_free_block = prev
            prev = blk
            num_tail += 1
        prev.next_free_block = tail
        tail.prev_free_block = prev
        queue.num_free_blocks += num_tail
        self.num_free_cached += num_hashed
        if to_head:
            queue.prepend_n(to_head)

    # ---- maintenance -------------------------------------------------------------------------
    def reset_prefix_cache(self) -> bool:
        num_used = self.num_gpu_blocks - self.get_num_free_blocks()
        if num_used != 1:
            logger.warning(
                "Failed to reset prefix cache because some blocks (%d) are not freed yet",
                num_used - 1,
            )
            return False
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        for blk in self.blocks:
            blk.reset_hash()
        self.num_free_cached = 0
        return True

    def get_usage(self) -> float:
        total = self.num_gpu_blocks - 1
        if total <= 0:
            return 0.0
        return 1.0 - self.get_num_free_blocks() / total
