"""The block pool's hot loops: the C twin (_pool_loops.c) against the Python reference
(pool_loops.py), operation by operation, and the C KVCacheBlock's attribute contract.

The differential test drives two BlockPools, one per implementation, through the same random
allocations, cachings (duplicate keys included), hit runs, touches (null block included), frees
in both free orders, with caching on and off, and compares after every operation the whole state:
each block's fields, the queue's order and back links, the map's entries in insertion order
(duplicates' dicts too) and the pool's counters.
"""

from __future__ import annotations

import copy
import gc
import pickle
import random
import shutil
import sys
import sysconfig

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.cache.apc import ApcCache, pool_loops
from engines.cache.apc.block_pool import BlockPool

needs_native = pytest.mark.skipif(pool_loops.NATIVE is None, reason="_pool_loops is not built here")

OPS = st.lists(
    st.tuples(st.sampled_from("aaaacccchhtfffnr"), st.integers(0, 2**16)), min_size=40, max_size=100
)


def _id(blk) -> int | None:
    return None if blk is None else blk.block_id


def snapshot(pool: BlockPool) -> tuple:
    """Everything a loop may change, by block id (the two pools' blocks are different objects)."""
    blocks = [
        (
            b.block_id,
            b.ref_cnt,
            b.block_hash,
            b.is_null,
            b.provenance,
            _id(b.prev_free_block),
            _id(b.next_free_block),
        )
        for b in pool.blocks
    ]
    queue = pool.free_block_queue
    free = [b.block_id for b in queue.get_all_free_blocks()]
    entries = [
        (key, [b.block_id for b in e.values()] if isinstance(e, dict) else e.block_id)
        for key, e in pool.cached_block_hash_to_block.entries.items()
    ]
    ends = (
        _id(queue.fake_free_list_head.next_free_block),
        _id(queue.fake_free_list_tail.prev_free_block),
    )
    counts = (queue.num_free_blocks, pool.num_free_cached, pool.num_evictions)
    return blocks, free, entries, ends, counts


class Twin:
    """One pool per implementation and the block tables each holds, as ids."""

    def __init__(self, num_blocks: int, caching: bool, order: str) -> None:
        self.pools = [BlockPool(num_blocks, caching, order, loops) for loops in IMPLEMENTATIONS]
        self.caching = caching
        self.tables: list[tuple[list[int], int]] = []  # (block ids, how many are cached)

    def each(self, fn):
        """Run fn(pool, blocks-by-id) on both pools; the results must agree."""
        results = [fn(pool, pool.blocks) for pool in self.pools]
        assert results[0] == results[1]
        return results[0]

    def apply(self, op: str, x: int) -> None:
        getattr(self, f"op_{op}")(x)
        assert snapshot(self.pools[0]) == snapshot(self.pools[1]), f"after {op} {x}"

    def op_a(self, x: int) -> None:  # allocate, freeing the oldest tables first if it must
        n = x % 5
        while n > self.pools[0].get_num_free_blocks() and self.tables:
            self.op_f(2 * len(self.tables))  # the oldest table, tail first
        if n > self.pools[0].get_num_free_blocks():
            return
        ids = self.each(lambda pool, _: [b.block_id for b in pool.get_new_blocks(n)])
        self.tables.append((ids, 0))

    def op_c(self, x: int) -> None:  # cache a table's next full blocks; few keys, so duplicates
        if not self.tables or not self.caching:
            return
        t = x % len(self.tables)
        ids, num_cached = self.tables[t]
        stop = min(len(ids), num_cached + 1 + (x >> 4) % 3)
        keys = [bytes([(x >> 6) % 7 + i % 2]) * 4 for i in range(stop)]

        def cache(pool, blocks):
            pool.cache_full_blocks(keys, [blocks[i] for i in ids], num_cached, stop)

        self.each(cache)
        self.tables[t] = (ids, max(num_cached, stop))

    def op_h(self, x: int) -> None:  # a hit run, adopted as a new table (an admission)
        keys = [bytes([(x >> s) % 8]) * 4 for s in range(0, 12, 3)]
        ids = self.each(lambda pool, _: [b.block_id for b in pool.hit_run(keys, 1 + x % 4)])
        self.each(lambda pool, blocks: pool.touch([blocks[i] for i in ids]))
        self.tables.append((ids, len(ids)))

    def op_t(self, x: int) -> None:  # the null block is skipped by touch, goes negative on free
        self.each(lambda pool, _: pool.touch([pool.null_block]))
        self.each(lambda pool, _: pool.free_blocks([pool.null_block]))

    def op_f(self, x: int) -> None:  # free a table, tail first as a request does, or in order
        if not self.tables:
            return
        ids, _ = self.tables.pop(x % len(self.tables))
        order = ids if x % 2 else ids[::-1]

        def free(pool, blocks):
            picked = [blocks[i] for i in order]
            pool.free_blocks(reversed(picked) if x % 4 == 1 else picked)

        self.each(free)

    def op_n(self, x: int) -> None:  # no-op edge cases
        self.each(lambda pool, _: pool.get_new_blocks(0))
        self.each(lambda pool, _: pool.free_blocks([]))
        self.each(lambda pool, _: pool.touch(()))

    def op_r(self, x: int) -> None:
        if not self.tables:
            self.each(lambda pool, _: pool.reset_prefix_cache())


IMPLEMENTATIONS = [pool_loops.PYTHON, pool_loops.NATIVE]


@needs_native
def test_native_loops_match_the_python_reference_operation_by_operation():
    counts = {"ops": 0, "evictions": 0, "duplicates": 0}

    @settings(max_examples=120, deadline=None, derandomize=True)
    @given(
        num_blocks=st.integers(1, 10),
        caching=st.booleans(),
        order=st.sampled_from(["classic", "v024"]),
        ops=OPS,
    )
    def run(num_blocks, caching, order, ops):
        twin = Twin(num_blocks, caching, order)
        for op, x in ops:
            twin.apply(op, x)
            counts["ops"] += 1
            entries = twin.pools[0].cached_block_hash_to_block.entries
            counts["duplicates"] += any(isinstance(e, dict) for e in entries.values())
        counts["evictions"] += twin.pools[0].num_evictions

    run()
    # the interesting paths were taken: lazy evictions and duplicate keys
    assert counts["ops"] > 3000 and counts["evictions"] > 150 and counts["duplicates"] > 150


@needs_native
def test_native_reference_counts_match_python_and_nothing_leaks():
    """The C loops hold and drop references where the Python ones do: after the same seeded
    operations each native block has the reference count of its Python twin, and a dropped pool
    frees every block (links are a cycle: the collector must see them). Outside hypothesis, whose
    tracing can keep Python frames, and so references, alive."""
    rng = random.Random(0)
    for caching, order in [(True, "v024"), (True, "classic"), (False, "v024")]:
        twin = Twin(9, caching, order)
        for _ in range(1500):
            twin.apply(rng.choice("aaaacccchhtfffnr"), rng.randrange(2**16))
        python, native = ([sys.getrefcount(b) for b in pool.blocks] for pool in twin.pools)
        assert python == native
    del twin
    gc.collect()
    native_type = pool_loops.NATIVE.block_type
    before = sum(type(o) is native_type for o in gc.get_objects())
    pool = BlockPool(64, True, "v024", pool_loops.NATIVE)
    pool.cache_full_blocks([bytes([i]) for i in range(8)], pool.get_new_blocks(8), 0, 8)
    assert sum(type(o) is native_type for o in gc.get_objects()) == before + 66  # + 2 sentinels
    del pool
    gc.collect()
    assert sum(type(o) is native_type for o in gc.get_objects()) == before


@needs_native
def test_native_block_keeps_the_attribute_contract():
    blk = pool_loops.NATIVE.block_type(7)
    fields = (blk.block_id, blk.ref_cnt, blk.block_hash, blk.is_null, blk.provenance)
    assert fields == (7, 0, None, False, None)
    assert blk.prev_free_block is None and blk.next_free_block is None
    blk.block_hash, blk.provenance, blk.ref_cnt, blk.is_null = b"k", (None, None, (1,)), 2, True
    assert repr(blk) == "KVCacheBlock(id=7, ref=2, hashed=True)"
    twin = copy.deepcopy(blk)
    assert twin is not blk and (twin.block_id, twin.ref_cnt, twin.block_hash) == (7, 2, b"k")
    assert pickle.loads(pickle.dumps(blk)).provenance == (None, None, (1,))
    blk.reset_hash()
    assert blk.block_hash is None and blk.provenance is None
    with pytest.raises(TypeError, match="native KVCacheBlock or None"):
        blk.next_free_block = object()
    with pytest.raises(AttributeError):
        blk.block_id = 3


@needs_native
def test_native_pool_keeps_the_queue_linked_through_copies():
    pool = BlockPool(6, True, "v024", pool_loops.NATIVE)
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks([b"a", b"b", b"c"], blocks, 0, 2)
    pool.free_blocks(reversed(blocks))
    clone = copy.deepcopy(pool)
    assert snapshot(clone) == snapshot(pool)
    assert [b.block_id for b in clone.get_new_blocks(5)] == [
        b.block_id for b in pool.get_new_blocks(5)
    ]


@pytest.mark.parametrize("loops", IMPLEMENTATIONS, ids=["python", "native"])
def test_touching_a_held_block_that_is_not_queued_fails(loops):
    if loops is None:
        pytest.skip("_pool_loops is not built here")
    pool = BlockPool(4, True, "v024", loops)
    (blk,) = pool.get_new_blocks(1)
    blk.ref_cnt = 0  # a corrupted count: ref 0 but never freed
    with pytest.raises(
        RuntimeError, match=f"touch: block {blk.block_id} has ref 0 but is not free"
    ):
        pool.touch([blk])


@needs_native
def test_native_pop_refuses_to_walk_past_the_tail():
    pool = BlockPool(3, True, "v024", pool_loops.NATIVE)
    queue = pool.free_block_queue
    with pytest.raises(RuntimeError, match="shorter than asked"):
        pool.loops.pop_free(queue.fake_free_list_head, 3, {}, None)
    # The pool checks the count first, so only a corrupted count gets here: the error is raised
    # and the queue stays a walkable list (the blocks taken before the tail are out of it).
    assert queue.get_all_free_blocks() == []
    assert queue.fake_free_list_tail.prev_free_block is queue.fake_free_list_head


@needs_native
def test_native_loops_refuse_foreign_blocks():
    pool = BlockPool(3, True, "v024", pool_loops.NATIVE)
    with pytest.raises(TypeError, match="expected a native KVCacheBlock"):
        pool.free_blocks([pool_loops.PYTHON.block_type(1)])
    with pytest.raises(TypeError, match="expected a native KVCacheBlock"):
        pool.cache_full_blocks([b"k"], [pool_loops.PYTHON.block_type(1)], 0, 1)
    before = snapshot(pool)
    with pytest.raises(TypeError, match="expected a native KVCacheBlock"):
        pool.touch([pool.blocks[1], pool_loops.PYTHON.block_type(2)])
    assert snapshot(pool) == before  # checked before anything is taken


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_apc_cache_runs_on_either_implementation(native, monkeypatch):
    """What a machine without the build runs: ApcCache picks the loops when its pool is made."""
    if native and pool_loops.NATIVE is None:
        pytest.skip("_pool_loops is not built here")
    if not native:
        monkeypatch.setattr(pool_loops, "NATIVE", None)
    cache = ApcCache(8, 4, none_hash_seed="0")
    assert cache.pool.loops is (pool_loops.NATIVE if native else pool_loops.PYTHON)
    assert type(cache.pool.null_block) is cache.pool.loops.block_type


def test_the_pool_loops_are_built_where_they_can_be():
    """setup.py builds _pool_loops optionally; where a C compiler exists (this project's CI
    machine) a missing build is an install step gone wrong, not a fallback."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip("no C compiler here: the Python loops are the ones in use")
    assert pool_loops.NATIVE is not None, "engines/cache/apc/_pool_loops.c was not built"
