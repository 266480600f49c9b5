"""The block pool's five hot loops, the reference in Python (docs/apc.md §2.5).

BlockPool keeps the counters and the policy; these loops walk blocks and links. `_pool_loops.c`
(built by setup.py) provides the same names over a C twin of KVCacheBlock, so the pool runs
either set unchanged; where it is not built, the pool runs these. On a replay-sized pool (112k
blocks, 0% hit) a block costs about 1.2 us here and 0.7 us in C, where cache misses on the map
are most of what is left. tests/unit/test_apc_pool_loops.py runs both through the same operations and
compares every block, link, count and map entry.

    pop_free(head, n, entries, pop_duplicate) -> (blocks, num_evicted)
    link_free(head, tail, blocks, prepend_hashless) -> (num_freed, num_hashed)
    cache_run(keys, blocks, start, stop, entries, add_duplicate) -> None
    take_free(blocks) -> (num_removed, num_hashed)
    hit_run(keys, max_blocks, entries) -> blocks

`entries` is BlockHashToBlockMap's dict: key -> block, or {block_id: block} once a second block
arrives under the key. The rare duplicate cases call back into the map (`pop_duplicate` =
map.pop, `add_duplicate` = map.add_duplicate). Counters live with the caller: the loops return
what changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType
from typing import NamedTuple, cast

from engines.cache.apc.block import KVCacheBlock, link_between

# The block map's forms (block_pool.py BlockHashToBlockMap): one block, or the duplicates by id.
Entry = KVCacheBlock | dict[int, KVCacheBlock]
Entries = dict[bytes, Entry]
PopDuplicate = Callable[[bytes, int], object]  # BlockHashToBlockMap.pop
AddDuplicate = Callable[[bytes, Entry, KVCacheBlock], None]  # BlockHashToBlockMap.add_duplicate

try:  # built by setup.py where a C compiler is; the same contracts
    from engines.cache.apc import _pool_loops  # type: ignore[attr-defined]

    _native: ModuleType | None = _pool_loops
except ImportError:
    _native = None


def pop_free(
    head: KVCacheBlock, n: int, entries: Entries, pop_duplicate: PopDuplicate
) -> tuple[list[KVCacheBlock], int]:
    """Take the first `n` blocks after `head` (the caller checked n <= free count). A cached one
    is evicted from the map (lazily, here); each gets ref_cnt 1 (queued blocks have 0)."""
    out: list[KVCacheBlock] = []
    append = out.append
    num_evicted = 0
    # Never None: the queue's sentinel tail follows the last free block.
    blk = cast(KVCacheBlock, head.next_free_block)
    for _ in range(n):
        key = blk.block_hash
        if key is not None:  # stale provenance is harmless: it is read only through the map
            entry = entries[key]
            if entry is blk:
                del entries[key]
            else:  # duplicates under this key: remove only this block id
                pop_duplicate(key, blk.block_id)
            blk.block_hash = None
            num_evicted += 1
        blk.ref_cnt = 1
        blk.prev_free_block = None
        append(blk)
        nxt = blk.next_free_block
        blk.next_free_block = None
        blk = cast(KVCacheBlock, nxt)
    head.next_free_block = blk
    blk.prev_free_block = head
    return out, num_evicted


def link_free(
    head: KVCacheBlock, tail: KVCacheBlock, blocks: Iterable[KVCacheBlock], prepend_hashless: bool
) -> tuple[int, int]:
    """Drop one reference each; a block reaching 0 joins the queue at the tail, or, when it has
    no hash and `prepend_hashless`, at the head, keeping the order of `blocks` on each side."""
    prev = cast(KVCacheBlock, tail.prev_free_block)  # the sentinel head at least
    to_head: list[KVCacheBlock] = []
    num_tail = num_hashed = 0
    for blk in blocks:
        # The null block's ref_cnt is not maintained (§2.2): it goes negative, never to 0.
        blk.ref_cnt -= 1
        if blk.ref_cnt:
            continue
        if blk.block_hash is not None:
            num_hashed += 1
        elif prepend_hashless:
            to_head.append(blk)
            continue
        prev.next_free_block = blk
        blk.prev_free_block = prev
        prev = blk
        num_tail += 1
    prev.next_free_block = tail
    tail.prev_free_block = prev
    if to_head:
        link_between(head, to_head, cast(KVCacheBlock, head.next_free_block))
    return num_tail + len(to_head), num_hashed


def cache_run(
    keys: list[bytes],
    blocks: list[KVCacheBlock],
    start: int,
    stop: int,
    entries: Entries,
    add_duplicate: AddDuplicate,
) -> None:
    """Give blocks[start:stop] their keys and insert them. Upstream's setter asserts the hash
    was None; blocks past the cached count are fresh from pop_free by construction, and
    check_integrity catches a re-keyed block (its old entry would point at a foreign key)."""
    setdefault = entries.setdefault
    for i in range(start, stop):
        blk, key = blocks[i], keys[i]
        blk.block_hash = key
        entry = setdefault(key, blk)
        if entry is not blk:  # same content cached already: keep both, the first one wins
            add_duplicate(key, entry, blk)


def take_free(blocks: Iterable[KVCacheBlock]) -> tuple[int, int]:
    """Take a reference on each block (the null block is skipped); a free one leaves the queue."""
    num_removed = num_hashed = 0
    for blk in blocks:
        if blk.is_null:
            continue
        if blk.ref_cnt == 0:
            prev, nxt = blk.prev_free_block, blk.next_free_block
            if prev is None or nxt is None:
                raise RuntimeError(f"touch: block {blk.block_id} has ref 0 but is not free")
            prev.next_free_block = nxt
            nxt.prev_free_block = prev
            blk.prev_free_block = blk.next_free_block = None
            num_removed += 1
            num_hashed += blk.block_hash is not None
        blk.ref_cnt += 1
    return num_removed, num_hashed


def hit_run(keys: list[bytes], max_blocks: int, entries: Entries) -> list[KVCacheBlock]:
    """The blocks cached under keys[:max_blocks], up to the first miss; under a duplicated key
    the first inserted block answers."""
    hits: list[KVCacheBlock] = []
    for key in keys[:max_blocks]:
        entry = entries.get(key)
        if entry is None:
            break
        hits.append(next(iter(entry.values())) if isinstance(entry, dict) else entry)
    return hits


class PoolLoops(NamedTuple):
    """One implementation: its block type and the five loops."""

    block_type: type[KVCacheBlock]
    pop_free: Callable[[KVCacheBlock, int, Entries, PopDuplicate], tuple[list[KVCacheBlock], int]]
    link_free: Callable[[KVCacheBlock, KVCacheBlock, Iterable[KVCacheBlock], bool], tuple[int, int]]
    cache_run: Callable[[list[bytes], list[KVCacheBlock], int, int, Entries, AddDuplicate], None]
    take_free: Callable[[Iterable[KVCacheBlock]], tuple[int, int]]
    hit_run: Callable[[list[bytes], int, Entries], list[KVCacheBlock]]


PYTHON = PoolLoops(KVCacheBlock, pop_free, link_free, cache_run, take_free, hit_run)
NATIVE = (
    PoolLoops(
        _native.KVCacheBlock,
        _native.pop_free,
        _native.link_free,
        _native.cache_run,
        _native.take_free,
        _native.hit_run,
    )
    if _native is not None
    else None
)


def default_loops() -> PoolLoops:
    """The C loops where built, else the Python ones (read at each BlockPool's construction)."""
    return NATIVE if NATIVE is not None else PYTHON
