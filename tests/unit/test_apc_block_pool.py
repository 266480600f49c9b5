"""APC blocks, free queue and BlockPool (docs/apc.md §2-§3)."""

from __future__ import annotations

import pytest

from engines.cache.apc.block import FreeKVCacheBlockQueue, KVCacheBlock
from engines.cache.apc.block_pool import FREE_ORDERS, BlockHashToBlockMap, BlockPool


def _ids(blocks):
    return [b.block_id for b in blocks]


def _queue(n=6):
    blocks = [KVCacheBlock(i) for i in range(n)]
    return blocks, FreeKVCacheBlockQueue(blocks)


def test_queue_initial_order_and_popleft():
    blocks, q = _queue(4)
    assert _ids(q.get_all_free_blocks()) == [0, 1, 2, 3] and len(q) == 4
    assert q.popleft() is blocks[0]
    assert blocks[0].prev_free_block is None and blocks[0].next_free_block is None
    assert _ids(q.popleft_n(2)) == [1, 2] and q.popleft_n(0) == []
    assert len(q) == 1
    q.popleft()
    with pytest.raises(ValueError, match="No free blocks available"):
        q.popleft()
    assert q.get_all_free_blocks() == []


def test_queue_remove_append_prepend_keep_order():
    blocks, q = _queue(6)
    q.remove(blocks[2])
    q.remove(blocks[0])
    assert _ids(q.get_all_free_blocks()) == [1, 3, 4, 5]
    with pytest.raises(RuntimeError):
        q.remove(blocks[2])
    q.append_n([blocks[2], blocks[0]])
    assert _ids(q.get_all_free_blocks()) == [1, 3, 4, 5, 2, 0]
    taken = q.popleft_n(2)
    q.prepend_n(taken[::-1])
    assert _ids(q.get_all_free_blocks()) == [3, 1, 4, 5, 2, 0]
    assert q.num_free_blocks == 6
    q.append(q.popleft())
    assert _ids(q.get_all_free_blocks()) == [1, 4, 5, 2, 0, 3]


def test_map_keeps_duplicates_first_inserted_wins():
    m = BlockHashToBlockMap()
    b2, b3, b4 = KVCacheBlock(2), KVCacheBlock(3), KVCacheBlock(4)
    m.insert(b"k", b2)
    m.insert(b"k", b3)
    m.insert(b"k", b4)
    assert m.get_one_block(b"k") is b2 and _ids(m.get_all_blocks(b"k")) == [2, 3, 4]
    assert m.pop(b"k", 9) is None
    assert m.pop(b"k", 2) is b2 and m.get_one_block(b"k") is b3
    assert m.pop(b"k", 3) is b3 and m.get_one_block(b"k") is b4
    assert m.pop(b"k", 4) is b4 and b"k" not in m and len(m) == 0
    assert m.get_one_block(b"missing") is None


def test_pool_null_block_and_first_allocation():
    pool = BlockPool(5, True)
    assert pool.null_block.block_id == 0 and pool.null_block.is_null
    assert pool.get_num_free_blocks() == 4
    blocks = pool.get_new_blocks(3)
    assert _ids(blocks) == [1, 2, 3] and all(b.ref_cnt == 1 for b in blocks)
    with pytest.raises(ValueError):
        pool.get_new_blocks(2)
    assert pool.get_usage() == pytest.approx(0.75)


def test_cache_full_blocks_and_lazy_eviction():
    pool = BlockPool(4, True)
    blocks = pool.get_new_blocks(3)
    keys = [b"a", b"b", b"c"]
    pool.cache_full_blocks(keys, blocks, 0, 2)
    assert blocks[0].block_hash == b"a" and blocks[2].block_hash is None
    pool.cache_full_blocks(keys, blocks, 2, 2)  # no-op
    pool.free_blocks(blocks[::-1])
    assert pool.get_cached_block(b"a") is blocks[0]  # freed, still hittable
    assert pool.num_free_cached == 2
    # v024: the hashless block 3 went to the head; hashed 2, 1 to the tail
    assert _ids(pool.free_block_queue.get_all_free_blocks()) == [3, 2, 1]
    assert _ids(pool.get_new_blocks(2)) == [3, 2]
    assert pool.get_cached_block(b"b") is None and blocks[1].block_hash is None
    assert pool.num_evictions == 1 and pool.num_free_cached == 1


def test_touch_removes_free_blocks_and_counts_refs():
    pool = BlockPool(4, True)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks([b"a", b"b"], blocks, 0, 2)
    pool.free_blocks(blocks[::-1])
    pool.touch([blocks[0]])
    assert blocks[0].ref_cnt == 1 and _ids(pool.free_block_queue.get_all_free_blocks()) == [3, 2]
    pool.touch([blocks[0], pool.null_block])
    assert blocks[0].ref_cnt == 2 and pool.get_num_free_blocks() == 2


@pytest.mark.parametrize(
    "order,expected", [("classic", [3, 4, 5, 2, 1]), ("v024", [2, 3, 4, 5, 1])]
)
def test_free_order_rules(order, expected):
    pool = BlockPool(6, True, order)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks([b"a"], blocks, 0, 1)
    pool.free_blocks(blocks[::-1])
    assert _ids(pool.free_block_queue.get_all_free_blocks()) == expected


@pytest.mark.parametrize(
    "order,expected", [("classic", [3, 4, 5, 2, 1]), ("v024", [2, 1, 3, 4, 5])]
)
def test_free_order_with_caching_off(order, expected):
    pool = BlockPool(6, False, order)
    blocks = pool.get_new_blocks(2)
    pool.free_blocks(blocks[::-1])
    assert _ids(pool.free_block_queue.get_all_free_blocks()) == expected


def test_unknown_free_order_lists_valid():
    with pytest.raises(ValueError, match="valid: classic, v024"):
        BlockPool(4, True, "lifo")
    assert (
        FREE_ORDERS.get("v024").reserve_full_prompt
        and not FREE_ORDERS.get("classic").async_scheduling
    )


def test_reset_refuses_while_held_then_clears(caplog):
    pool = BlockPool(4, True)
    blocks = pool.get_new_blocks(1)
    pool.cache_full_blocks([b"a"], blocks, 0, 1)
    with caplog.at_level("WARNING"):
        assert pool.reset_prefix_cache() is False
    assert "not freed yet" in caplog.text
    pool.free_blocks(blocks)
    assert pool.reset_prefix_cache() is True
    assert len(pool.cached_block_hash_to_block) == 0 and blocks[0].block_hash is None
    assert pool.num_free_cached == 0


def test_duplicate_insert_in_one_batch_keeps_first():
    pool = BlockPool(5, True)
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks([b"x", b"x", b"y"], blocks, 0, 3)
    assert pool.get_cached_block(b"x") is blocks[0]
    assert _ids(pool.cached_block_hash_to_block.get_all_blocks(b"x")) == [1, 2]
    assert pool.cached_block_hash_to_block.num_blocks() == 3


def test_usage_only_null_block():
    assert BlockPool(1, True).get_usage() == 0.0
