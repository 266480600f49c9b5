"""KV cache blocks and the free-block queue of vLLM V1 (docs/apc.md §2.1-2.3).

The queue is a doubly linked list threaded through the blocks themselves, between two sentinels,
so O(1) remove from the middle (a cache hit on a free block) creates no Python objects:

    fake_head <-> b5 <-> b2 <-> b1 <-> ... <-> fake_tail      (head = evicted first)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast


class KVCacheBlock:
    """One physical KV page. `block_hash` (hash + group id) is set once, when the block is full
    and cached (BlockPool.cache_full_blocks), and cleared on eviction. `_pool_loops.c` has a C
    twin with the same attributes (pool_loops.py)."""

    __slots__ = (
        "block_id",
        "ref_cnt",
        "block_hash",
        "prev_free_block",
        "next_free_block",
        "is_null",
        "provenance",
    )

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: bytes | None = None
        self.prev_free_block: KVCacheBlock | None = None
        self.next_free_block: KVCacheBlock | None = None
        self.is_null = False
        # verify_tokens_on_hit only: (parent block id, extra keys, own tokens) at caching time
        self.provenance: tuple[Any, ...] | None = None

    def reset_hash(self) -> None:
        self.block_hash = None
        self.provenance = None

    def __repr__(self) -> str:
        return f"KVCacheBlock(id={self.block_id}, ref={self.ref_cnt}, hashed={self.block_hash is not None})"


class FreeKVCacheBlockQueue:
    """Free blocks, least recently released first; `num_free_blocks` is kept in step.
    `block_type` makes the sentinels: the blocks' own type, so a native loop can walk them."""

    def __init__(self, blocks: list[KVCacheBlock], block_type: type = KVCacheBlock) -> None:
        self.num_free_blocks = len(blocks)
        self.fake_free_list_head = block_type(-1)
        self.fake_free_list_tail = block_type(-1)
        link_between(self.fake_free_list_head, blocks, self.fake_free_list_tail)

    def __len__(self) -> int:
        return self.num_free_blocks

    def popleft(self) -> KVCacheBlock:
        if self.num_free_blocks == 0:
            raise ValueError("No free blocks available")
        return self.popleft_n(1)[0]

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Remove the first n blocks in order; the caller guarantees n <= num_free_blocks."""
        if n == 0:
            return []
        assert n <= self.num_free_blocks, "popleft_n beyond the free count"
        head = self.fake_free_list_head
        out: list[KVCacheBlock] = []
        append = out.append
        blk = cast(KVCacheBlock, head.next_free_block)  # the sentinel tail ends the queue
        for _ in range(n):
            append(blk)
            blk.prev_free_block = None
            nxt = blk.next_free_block
            blk.next_free_block = None
            blk = cast(KVCacheBlock, nxt)
        head.next_free_block = blk
        blk.prev_free_block = head
        self.num_free_blocks -= n
        return out

    def remove(self, block: KVCacheBlock) -> None:
        prev, nxt = block.prev_free_block, block.next_free_block
        if prev is None or nxt is None:
            raise RuntimeError(f"remove() called on a block that is not free: {block}")
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        self.append_n((block,))

    def append_n(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Link `blocks` at the tail, keeping their order."""
        tail = self.fake_free_list_tail
        self.num_free_blocks += link_between(tail.prev_free_block, blocks, tail)

    def prepend_n(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Link `blocks` at the head, keeping their order (the first becomes the new head)."""
        head = self.fake_free_list_head
        self.num_free_blocks += link_between(head, blocks, head.next_free_block)

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """Head-to-tail list (tests and integrity checks)."""
        out = []
        blk = self.fake_free_list_head.next_free_block
        tail = self.fake_free_list_tail
        while blk is not tail:
            out.append(blk)
            blk = blk.next_free_block
        return out


def link_between(left: KVCacheBlock, blocks: Iterable[KVCacheBlock], right: KVCacheBlock) -> int:
    """Link `blocks`, in order, between the adjacent nodes `left` and `right`; how many."""
    prev = left
    count = 0
    for blk in blocks:
        prev.next_free_block = blk
        blk.prev_free_block = prev
        prev = blk
        count += 1
    prev.next_free_block = right
    right.prev_free_block = prev
    return count
