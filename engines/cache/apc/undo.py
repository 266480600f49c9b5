"""A journal of the block pool's changes, undone in O(blocks touched) (the apc `UndoableCache`).

Each BlockPool operation tells the journal, before it runs, which blocks and map keys it is
about to change (the popped blocks and the one after them, a hit block's queue neighbours, the
queue ends a free links to, the blocks a run caches); the journal keeps the first state it sees
of each, so `rollback` restores links, reference counts, hashes, map entries, counters and the
event log exactly as they were. A pool of any size costs the same: nothing is walked or copied
beyond what the step touched.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from engines.cache.apc.block import KVCacheBlock

if TYPE_CHECKING:
    from engines.cache.apc.block_pool import BlockPool

_MISSING = object()  # a map key that held nothing


class PoolJournal:
    """The first-seen state of every block, map key and counter an operation changed."""

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self._blocks: dict[int, tuple[KVCacheBlock, tuple[Any, ...]]] = {}
        self._keys: dict[bytes, object] = {}
        queue = pool.free_block_queue
        self._counters = (queue.num_free_blocks, pool.num_free_cached, pool.num_evictions)
        self._map = pool.cached_block_hash_to_block
        self._events = list(pool.events.events) if pool.events is not None else None

    @property
    def blocks_touched(self) -> int:
        """Blocks (sentinels included) whose state the journal keeps: what a rollback restores."""
        return len(self._blocks)

    def note_blocks(self, blocks: Iterable[KVCacheBlock | None]) -> None:
        for blk in blocks:
            if blk is not None and id(blk) not in self._blocks:
                state = (
                    blk.ref_cnt,
                    blk.block_hash,
                    blk.prev_free_block,
                    blk.next_free_block,
                    blk.provenance,
                )
                self._blocks[id(blk)] = (blk, state)

    def note_keys(self, keys: Iterable[bytes | None]) -> None:
        entries = self.pool.cached_block_hash_to_block.entries
        for key in keys:
            if key is None or key in self._keys:
                continue
            entry = entries.get(key, _MISSING)
            # a dict of duplicates is changed in place: keep its contents too
            self._keys[key] = (entry, dict(entry)) if isinstance(entry, dict) else entry

    def note_pop(self, num_blocks: int) -> None:
        """`get_new_blocks(num_blocks)`: the head, the popped blocks, the block after them."""
        head = self.pool.free_block_queue.fake_free_list_head
        popped = []
        blk = head.next_free_block
        for _ in range(num_blocks):
            assert blk is not None  # the caller checked the count; the tail sentinel ends it
            popped.append(blk)
            blk = blk.next_free_block
        self.note_blocks([head, *popped, blk])
        self.note_keys(b.block_hash for b in popped)

    def note_touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """`touch`: the blocks and, for free ones, the queue neighbours they are unlinked from."""
        for blk in blocks:
            self.note_blocks((blk, blk.prev_free_block, blk.next_free_block))

    def note_free(self, blocks: list[KVCacheBlock]) -> None:
        """`free_blocks`: the blocks and both queue ends with their neighbours."""
        queue = self.pool.free_block_queue
        head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
        self.note_blocks([*blocks, head, head.next_free_block, tail, tail.prev_free_block])

    def note_cache(
        self, keys: list[bytes], blocks: list[KVCacheBlock], start: int, stop: int
    ) -> None:
        """`cache_full_blocks`: blocks[start:stop] get keys[start:stop]."""
        self.note_blocks(blocks[start:stop])
        self.note_keys(keys[start:stop])

    def note_everything(self) -> None:
        """A prefix-cache reset rehashes every block and replaces the map (never in a trial)."""
        self.note_blocks(self.pool.blocks)
        self.note_keys(list(self.pool.cached_block_hash_to_block))

    def rollback(self) -> None:
        pool = self.pool
        pool.cached_block_hash_to_block = self._map
        entries = self._map.entries
        for key, saved in self._keys.items():
            if saved is _MISSING:
                entries.pop(key, None)
            elif isinstance(saved, tuple):
                entry, contents = saved
                entry.clear()
                entry.update(contents)
                entries[key] = entry
            else:
                entries[key] = saved  # type: ignore[assignment]
        for blk, state in self._blocks.values():
            (
                blk.ref_cnt,
                blk.block_hash,
                blk.prev_free_block,
                blk.next_free_block,
                blk.provenance,
            ) = state
        queue = pool.free_block_queue
        queue.num_free_blocks, pool.num_free_cached, pool.num_evictions = self._counters
        if pool.events is not None and self._events is not None:
            pool.events.events = list(self._events)
