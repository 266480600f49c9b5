"""docs/radix.md §12: every numbered invariant, one test each, with the spec's own numbers.

Conventions of §12: unified-tree semantics, page 1 and LRU unless stated, a controlled clock;
direct inserts get a recording allocator (they free the caller's duplicates).
"""

from __future__ import annotations

import random
from collections import deque

import pytest

from engines.cache.radix.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from engines.cache.radix.cache import RadixCache
from engines.cache.radix.eviction import make_eviction_policy
from engines.cache.radix.hooks import checkpoint, evict_to_free_tokens
from engines.cache.radix.key import RadixKey as K
from engines.cache.radix.key import pack, unpack
from engines.cache.radix.recency import LogicalClock
from engines.cache.radix.schedule_policy import dfs_weight_order
from engines.cache.radix.tree import UnifiedRadixTree
from engines.cache.records import CacheIntegrityError
from engines.sched.base import StepBudget
from engines.sched.sglang import SglangScheduler as RadixAdmission
from engines.sequence import Sequence
from tests.radix_support import (
    RecordingAllocator,
    admit,
    decode_to_end,
    drive,
    make_seq,
    new_cache,
    serve,
    step,
)


def make_tree(page_size=1, policy="lru", allocator=None, **params):
    return UnifiedRadixTree(
        page_size,
        allocator or RecordingAllocator(),
        make_eviction_policy(policy, **params),
        LogicalClock(),
    )


def node_at(tree, tokens):
    return tree.match_prefix(K(tokens)).last_device_node


def seg(node):
    return node.key.token_ids


def test_invariant_01_branching():
    tree = make_tree()
    tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13])
    assert tree.insert(K([1, 2, 5]), [20, 21, 22]).prefix_len == 2
    (top,) = tree.root_node.children.values()
    assert seg(top) == [1, 2]
    assert set(top.children) == {3, 5}
    assert seg(top.children[3]) == [3, 4] and seg(top.children[5]) == [5]
    assert tree.total_size() == 5


def test_invariant_02_existing_values_win():
    alloc = RecordingAllocator()
    tree = make_tree(allocator=alloc)
    tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13])
    tree.insert(K([1, 2, 5]), [20, 21, 22], prev_prefix_len=0)
    assert alloc.freed == [20, 21]
    result = tree.match_prefix(K([1, 2, 5]))
    path = tree.path_device_indices(result.last_device_node)
    assert path[: result.device_prefix_len].tolist() == [10, 11, 22]


def test_invariant_03_idempotent_insert():
    tree = make_tree()
    tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13])
    before = tree.evictable_size()
    assert tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13], prev_prefix_len=4).prefix_len == 4
    assert tree.evictable_size() == before
    tree.insert(K([1, 2, 3, 4, 6, 7]), [10, 11, 12, 13, 14, 15], prev_prefix_len=4)
    assert tree.evictable_size() == before + 2


def test_invariant_04_split_on_match():
    tree = make_tree()
    tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13])
    result = tree.match_prefix(K([1, 2, 3, 9]))
    assert result.device_prefix_len == 3
    assert seg(result.last_device_node) == [1, 2, 3]
    assert [seg(c) for c in result.last_device_node.children.values()] == [[4]]
    assert tree.total_size() == 4


def test_invariant_05_miss():
    tree = make_tree()
    tree.insert(K([1, 2, 3]), [10, 11, 12])
    for key in (K([7, 1]), K([])):
        result = tree.match_prefix(key)
        assert result.device_prefix_len == 0 and result.last_device_node is tree.root_node


def _random_tree_ops(tree, rng, steps, alloc=None):
    locks = []
    for _ in range(steps):
        op = rng.random()
        key = K([rng.randrange(4) for _ in range(rng.randrange(1, 9))])
        if op < 0.4:
            tree.insert(key, list(range(100, 100 + len(key))), prev_prefix_len=len(key))
        elif op < 0.6:
            tree.match_prefix(key)
        elif op < 0.75:
            locks.append(tree.lock(tree.match_prefix(key).last_device_node))
        elif op < 0.9 and locks:
            tree.unlock(locks.pop(rng.randrange(len(locks))))
        else:
            tree.evict(rng.randrange(1, 6))
        yield locks


def test_invariant_06_size_conservation():
    for seed in range(5):
        tree = make_tree()
        for _ in _random_tree_ops(tree, random.Random(seed), 400):
            assert tree.evictable_size() + tree.protected_size() == tree.total_size()


def test_invariant_07_lock_accounting():
    tree = make_tree()
    tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13])
    tree.insert(K([1, 2, 5]), [20, 21, 22], prev_prefix_len=3)
    leaf = node_at(tree, [1, 2, 3, 4])
    assert tree.inc_lock_ref(leaf) == 4  # [1,2] + [3,4] were unlocked
    assert (tree.evictable_size(), tree.protected_size()) == (1, 4)
    assert tree.inc_lock_ref(node_at(tree, [1, 2, 5])) == 1  # [1,2] already locked
    assert tree.inc_lock_ref(leaf) == 0  # nested
    assert tree.dec_lock_ref(leaf) == 0
    assert tree.protected_size() == 5
    assert tree.dec_lock_ref(node_at(tree, [1, 2, 5])) == 1
    assert tree.dec_lock_ref(leaf) == 4
    assert (tree.evictable_size(), tree.protected_size()) == (5, 0)


def test_invariant_08_lock_monotonicity():
    for seed in range(5):
        tree = make_tree()
        for _ in _random_tree_ops(tree, random.Random(seed), 300):
            for node in tree.nodes():
                if node.parent is not tree.root_node:
                    assert node.lock_ref <= node.parent.lock_ref


def test_invariant_09_split_inherits_locks():
    tree = make_tree()
    tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13])
    leaf = node_at(tree, [1, 2, 3, 4])
    tree.inc_lock_ref(leaf)
    tree.insert(K([1, 2, 5]), [20, 21, 22], prev_prefix_len=2)
    assert (tree.protected_size(), tree.evictable_size()) == (4, 1)
    tree.dec_lock_ref(leaf)
    assert all(node.lock_ref == 0 for node in tree.nodes())
    assert tree.evictable_size() == 5


def test_invariant_10_locked_paths_survive():
    alloc = RecordingAllocator()
    tree = make_tree(allocator=alloc)
    tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13])
    tree.insert(K([1, 2, 5]), [20, 21, 22], prev_prefix_len=3)
    tree.inc_lock_ref(node_at(tree, [1, 2, 3, 4]))
    assert tree.evict(100) == 1  # only [5]; [1,2] is an ancestor of a locked node
    assert alloc.freed == [22]
    tree.inc_lock_ref(node_at(tree, [1, 2, 3, 4]))
    alloc.freed.clear()
    assert tree.evict(3) == 0 and alloc.freed == []
    assert tree.total_size() == 4


def test_invariant_11_whole_leaf_lru_eviction():
    alloc = RecordingAllocator()
    tree = make_tree(allocator=alloc)
    tree.insert(K([1, 2]), [10, 11])
    tree.insert(K([3, 4, 5]), [12, 13, 14])
    assert tree.evict(1) == 2  # the older leaf goes whole
    assert alloc.freed == [10, 11]
    assert tree.evict(1) == 3
    assert alloc.freed == [10, 11, 12, 13, 14]


def test_invariant_12_match_refreshes_recency():
    alloc = RecordingAllocator()
    tree = make_tree(allocator=alloc)
    tree.insert(K([1, 2]), [10, 11])
    tree.insert(K([3, 4]), [12, 13])
    tree.match_prefix(K([1, 2]))
    tree.evict(1)
    assert alloc.freed == [12, 13]
    assert tree.match_prefix(K([1, 2])).device_prefix_len == 2


def test_invariant_13_leaf_only_with_cascade():
    alloc = RecordingAllocator()
    tree = make_tree(allocator=alloc)
    tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13])
    tree.insert(K([1, 2, 5]), [20, 21, 22], prev_prefix_len=2)
    assert tree.evict(2) == 2  # the LRU leaf [3,4]; [1,2] still has a child
    assert seg(node_at(tree, [1, 2])) == [1, 2]
    assert tree.evict(2) == 3  # [5], then its parent [1,2] in the same call
    assert tree.total_size() == 0 and alloc.freed == [12, 13, 22, 10, 11]


def test_invariant_14_evictable_leaf_set():
    for seed in range(5):
        tree = make_tree()
        for _ in _random_tree_ops(tree, random.Random(seed), 300):
            expected = {n for n in tree.nodes() if n.lock_ref == 0 and not n.children}
            assert tree.evictable_leaves == expected
            assert all(n.lock_ref == 0 and not n.children for n in tree.evictable_leaves)


def test_invariant_15_namespaces():
    tree = make_tree()
    tree.insert(K([1, 2, 3], extra_key="A"), [10, 11, 12])
    tree.insert(K([1, 2, 3], extra_key="B"), [20, 21, 22])
    tree.insert(K([1, 2, 3], cache_salt="s"), [30, 31, 32])
    tree.insert(K([1, 2, 3], extra_key="A", cache_salt="s"), [40, 41, 42])
    assert set(tree.root_node.children) == {("A", 1), ("B", 1), ((None, "s"), 1), (("A", "s"), 1)}
    assert tree.total_size() == 12
    assert tree.match_prefix(K([1, 2, 3], extra_key="A")).device_prefix_len == 3
    for key in (
        K([1, 2, 3]),
        K([1, 2, 3], extra_key="C"),
        K([1, 2, 3], cache_salt="t"),
        K([1, 2, 3], extra_key="B", cache_salt="s"),
    ):
        assert tree.match_prefix(key).device_prefix_len == 0
    assert K([1], cache_salt="").cache_salt is None


def test_invariant_16_paged_matching():
    tree = make_tree(page_size=4)
    tree.insert(K(list(range(1, 9))), list(range(40, 48)))
    assert tree.match_prefix(K([1, 2, 3, 4, 5, 6, 9, 9])).device_prefix_len == 4
    assert tree.match_prefix(K([1, 2, 3])).device_prefix_len == 0
    for n in range(1, 12):
        assert tree.match_prefix(K(list(range(1, n + 1)))).device_prefix_len % 4 == 0
    keys = [k for n in tree.nodes() for k in n.children]
    assert all(k == pack(unpack(k)) and len(unpack(k)) == 4 for k in keys)
    assert set(tree.root_node.children) == {pack([1, 2, 3, 4])}


def test_invariant_17_insert_page_aligns():
    tree = make_tree(page_size=4)
    result = tree.insert(K([1, 2, 3, 4, 5, 6]), [40, 41, 42, 43, 44, 45])
    assert seg(result.last_device_node) == [1, 2, 3, 4]
    assert result.last_device_node.value.tolist() == [40, 41, 42, 43]
    assert tree.total_size() == 4


def test_invariant_18_duplicate_freeing_page1():
    cache = new_cache(capacity=64)
    shared = list(range(1, 11))
    a = make_seq("a", shared, [50])
    b = make_seq("b", shared + [20, 21], [60, 61])
    st_a, st_b = admit(cache, a), admit(cache, b)  # both prefill the shared text concurrently
    a_slots = list(cache.req_to_token_pool.rows[st_a.row][:10])
    b_slots = list(cache.req_to_token_pool.rows[st_b.row])
    decode_to_end(cache, a)
    cache.release(a, finished=True)
    decode_to_end(cache, b)
    free_before = set(cache.allocator.free_slots())
    cache.release(b, finished=True)
    freed = set(cache.allocator.free_slots()) - free_before
    assert freed == set(b_slots[:10])  # [cache_protected_len, new_prefix_len) = [0, 10)
    result = cache.tree.match_prefix(K(shared + [20, 21, 60]))
    path = cache.tree.path_device_indices(result.last_device_node)
    assert result.device_prefix_len == 13
    assert path[:10].tolist() == a_slots and path[10:12].tolist() == b_slots[10:12]
    cache.check_integrity()


def test_invariant_19_unaligned_tail_page4():
    cache = new_cache(page_size=4, capacity=32)
    seq = make_seq("r", [1, 2, 3, 4, 5, 6], [7])  # owns 6 tokens at finish
    serve(cache, seq)
    assert cache.tree.total_size() == 4
    assert cache.allocator.available_size() == 32 - 4  # the tail's page went back
    cache.check_integrity()


def test_invariant_20_reset_and_disable():
    cache = new_cache(capacity=64)
    serve(cache, make_seq("r", range(1, 11), [5, 6]))
    assert cache.tree.total_size() > 0
    assert cache.reset()
    tree = cache.tree
    assert (tree.total_size(), tree.evictable_size(), tree.protected_size()) == (0, 0, 0)
    off = make_tree()
    off.disable = True
    assert off.insert(K([1, 2, 3]), [1, 2, 3]).prefix_len == 0
    assert off.match_prefix(K([1, 2, 3])).device_prefix_len == 0


def test_invariant_21_hit_count():
    tree = make_tree()
    tree.insert(K(list(range(1, 9))), list(range(8)))  # a request's checkpoint of [1..8]
    tree.insert(
        K(list(range(1, 13))), list(range(12)), inserted_len=8, prev_prefix_len=8
    )  # its finish
    low, high = node_at(tree, list(range(1, 9))), node_at(tree, list(range(1, 13)))
    assert (low.hit_count, high.hit_count) == (1, 1)
    tree.match_prefix(K(list(range(1, 13))))
    assert (low.hit_count, high.hit_count) == (1, 1)
    tree.insert(K(list(range(1, 13))), list(range(12)), prev_prefix_len=12)  # another request
    assert (low.hit_count, high.hit_count) == (2, 2)


def test_invariant_22_lfu():
    alloc = RecordingAllocator()
    tree = make_tree(policy="lfu", allocator=alloc)
    for _ in range(3):  # three requests
        tree.insert(K([1, 2]), [10, 11], prev_prefix_len=2)
    tree.insert(K([5, 6]), [12, 13])  # newer, one request
    tree.insert(K([5, 6]), [12, 13], inserted_len=2, prev_prefix_len=2)  # same request again
    assert node_at(tree, [5, 6]).hit_count == 1 and node_at(tree, [1, 2]).hit_count == 3
    tree.evict(1)
    assert alloc.freed == [12, 13]


def test_invariant_23_priority_policy():
    alloc = RecordingAllocator()
    tree = make_tree(policy="priority", allocator=alloc)
    tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13], priority=1)
    tree.insert(K([1, 2, 5]), [20, 21, 22], priority=3, prev_prefix_len=2)
    assert node_at(tree, [1, 2]).priority == 3
    assert node_at(tree, [1, 2, 3, 4]).priority == 1  # the split kept the child's priority
    tree.insert(K([9]), [30], priority=2)
    tree.evict(1)
    assert alloc.freed == [12, 13]  # (1, t) before (2, t') and (3, t'')
    cache = new_cache(capacity=64)
    serve(cache, make_seq("p", list(range(1, 7)), [7, 8, 9], priority=2))  # owns 8 tokens
    prompt = node_at(cache.tree, list(range(1, 7)))
    output = node_at(cache.tree, [1, 2, 3, 4, 5, 6, 7, 8])
    assert seg(prompt) == [1, 2, 3, 4, 5, 6] and prompt.priority >= 3
    assert seg(output) == [7, 8] and output.priority == 2


def test_invariant_24_idle_accounting():
    cache = new_cache(capacity=128)
    adm = RadixAdmission(cache, "fcfs")
    seqs = [make_seq(f"r{i}", [1, 2, 3, 4, 5, 10 + i, 11 + i], [i, i + 1, i + 2]) for i in range(6)]
    drive(adm, seqs, StepBudget(max_num_seqs=4, max_num_batched_tokens=16))
    assert cache.allocator.available_size() + cache.tree.evictable_size() == cache.capacity_tokens
    assert cache.tree.protected_size() == 0
    assert cache.req_to_token_pool.available_size() == cache.req_to_token_pool.size


@pytest.mark.parametrize(("page_size", "expected"), [(1, 99), (4, 96)])
def test_invariant_25_last_token_cap(page_size, expected):
    cache = new_cache(page_size=page_size, capacity=256)
    prompt = list(range(1, 101))
    serve(cache, make_seq("first", prompt, [1000, 1001]))
    assert cache.match(make_seq("again", prompt)).num_tokens == expected
    assert serve(cache, make_seq("again2", prompt)) == 100 - expected


def _cached_cache(prompts, page_size=1, capacity=1024):
    cache = new_cache(page_size=page_size, capacity=capacity)
    for i, prompt in enumerate(prompts):
        serve(cache, make_seq(f"warm{i}", prompt, [9999]))
    return cache


def test_invariant_26_lpm_order():
    base = list(range(1, 41))
    cache = _cached_cache([base])
    adm = RadixAdmission(cache, "lpm")
    queue = [
        make_seq("m5", base[:5] + [500, 501]),
        make_seq("m40", base + [600]),
        make_seq("m0", [700, 701, 702]),
        make_seq("m20", base[:20] + [800]),
        make_seq("m40b", base + [900]),
    ]
    waiting = deque(queue)
    adm.policy.calc_priority(waiting)
    assert [s.seq_id for s in waiting] == ["m40", "m40b", "m20", "m5", "m0"]
    long_queue = deque(reversed(queue + [make_seq(f"x{i}", [3000 + i]) for i in range(125)]))
    before = [s.seq_id for s in long_queue]
    adm.policy.calc_priority(long_queue)  # 130 waiting > 128: the current order is kept
    assert [s.seq_id for s in long_queue] == before


def test_invariant_27_in_batch_deprioritisation():
    cache = new_cache(capacity=1024)
    adm = RadixAdmission(cache, "lpm")
    shared = list(range(100, 140))  # 40 new tokens, not cached
    waiting = deque(
        [
            make_seq("a", shared + [1]),
            make_seq("b", shared + [2]),
            make_seq("c", [7, 8, 9]),
            make_seq("d", shared[:31] + [3]),  # shares only 31 < 32 with earlier requests
            make_seq("e", shared + [4], salt="other"),  # another namespace
        ]
    )
    adm.policy.calc_priority(waiting)
    assert adm.policy.last_deprioritized == {"b"}
    assert [s.seq_id for s in waiting] == ["a", "c", "d", "e", "b"]
    serve(cache, make_seq("warm", shared + [5], [6]))  # now the real-tree match is 40 > 32
    waiting = deque([make_seq("f", shared + [1]), make_seq("g", shared + [2])])
    adm.policy.calc_priority(waiting)
    assert adm.policy.last_deprioritized == set()


def test_invariant_28_dfs_weight_order():
    tree = make_tree()
    for prompt in ([1, 2, 3], [1, 2, 4, 5], [1, 2, 4, 6], [7, 8]):
        tree.insert(K(prompt), list(range(len(prompt))), prev_prefix_len=len(prompt))
    where = {
        "a": [1, 2, 3],
        "b": [1, 2, 4, 5],
        "c": [1, 2, 4, 6],
        "d": [1, 2, 4, 6],
        "e": [7, 8],
        "f": [1, 2],
        "z": [],
    }
    seqs = [Sequence(sid, [0], 1, 1) for sid in ["z", "a", "e", "f", "b", "c", "d"]]
    matches = {
        sid: type("M", (), {"last_node": node_at(tree, path) if path else tree.root_node})
        for sid, path in where.items()
    }
    order = [s.seq_id for s in dfs_weight_order(seqs, matches, set(), tree.root_node)]
    # [1,2] (weight 5) before [7,8] (1); below [1,2]: [4] (3) before [3] (1); post-order; root last
    assert order == ["c", "d", "b", "a", "f", "e", "z"]


def test_invariant_29_allocator_rules():
    alloc = TokenToKVPoolAllocator(20)
    tree = UnifiedRadixTree(1, alloc, clock=LogicalClock())
    for key in ([1], [2], [3, 4, 5, 6, 7]):  # leaves of 1, 1 and 5 tokens in LRU order
        tree.insert(K(key), alloc.alloc(len(key)))
    alloc.alloc(alloc.available_size() - 10)  # 10 available
    cache = type("C", (), {"tree": tree, "allocator": alloc})
    evict_to_free_tokens(cache, 12)
    assert alloc.available_size() == 12 and tree.total_size() == 5
    evict_to_free_tokens(cache, 12)  # available >= need: nothing happens
    assert tree.total_size() == 5
    paged = PagedTokenToKVPoolAllocator(16, 4)
    slots = paged.alloc(16)
    assert 0 not in slots and min(slots) == 4  # page 0 never handed out
    paged.free([13, 12, 5])  # unique(idx // 4) = pages 1, 3
    assert paged.available_size() == 8
    assert paged.alloc(4).tolist() == [4, 5, 6, 7]  # freed pages are reused first, ascending
    fresh = TokenToKVPoolAllocator(4)
    assert 0 not in fresh.alloc(4)


def test_invariant_30_slru():
    alloc = RecordingAllocator()
    tree = make_tree(policy="slru", allocator=alloc)
    tree.insert(K([1, 2]), [10, 11])
    tree.insert(K([1, 2]), [10, 11], prev_prefix_len=2)  # a second request: hit_count 2
    tree.insert(K([5, 6]), [12, 13])  # newer, hit_count 1
    tree.evict(1)
    assert alloc.freed == [12, 13]


def test_invariant_31_fifo_mru_filo():
    def run(policy):
        alloc = RecordingAllocator()
        tree = make_tree(policy=policy, allocator=alloc)
        tree.insert(K([1, 2]), [10, 11])
        tree.insert(K([3, 4]), [12, 13])
        tree.insert(K([5, 6]), [14, 15])
        tree.match_prefix(K([1, 2]))  # the oldest-created leaf is now the most recently used
        tree.evict(1)
        return alloc.freed

    assert run("fifo") == [10, 11]
    assert run("mru") == [10, 11]
    assert run("filo") == [14, 15]
    tree = make_tree(policy="fifo")
    tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13])
    created = node_at(tree, [1, 2, 3, 4]).creation_time
    tree.insert(K([1, 2, 5]), [20, 21, 22], prev_prefix_len=2)
    assert (
        node_at(tree, [1, 2]).creation_time == created == node_at(tree, [1, 2, 3, 4]).creation_time
    )


def test_invariant_32_token_allocator():
    alloc = TokenToKVPoolAllocator(8)
    assert alloc.alloc(3).tolist() == [1, 2, 3]
    assert alloc.alloc(6) is None
    assert alloc.alloc(5).tolist() == [4, 5, 6, 7, 8]
    assert alloc.alloc(1) is None


@pytest.mark.parametrize("page_size", [1, 4])
def test_invariant_33_canonical_rows(page_size):
    cache = new_cache(page_size=page_size, capacity=128)
    serve(cache, make_seq("warm", list(range(1, 21)), [77]))
    seq = make_seq("r", list(range(1, 31)), [5, 6])
    st = admit(cache, seq)
    for up_to in (27, seq.num_tokens):
        checkpoint(cache, st, seq, up_to)
        row = cache.req_to_token_pool.rows[st.row]
        path = cache.tree.path_device_indices(st.last_node)
        assert row[: st.cache_protected_len].tolist() == path.tolist()
        assert st.cache_protected_len == up_to // page_size * page_size
        assert st.cache_inserted_len >= st.cache_protected_len
        assert st.lock.node is st.last_node
        cache.check_integrity()  # lock_ref of every node == request locks through it


def test_invariant_34_per_batch_hit_rate():
    cache = new_cache(capacity=64)
    adm = RadixAdmission(
        cache, "fcfs", schedule_conservativeness=0.01
    )  # admits both, then retracts
    budget = StepBudget(max_num_seqs=4, max_num_batched_tokens=64)
    victims = [make_seq(f"v{i}", range(20 * i, 20 * i + 10), range(100, 125)) for i in range(2)]
    waiting, running = deque(victims), []
    for _ in range(60):
        step(adm, waiting, running, budget)
        if any(s.num_preemptions for s in victims):
            break
    assert [s.num_preemptions for s in victims] == [0, 1]  # a tie: the later batch position goes
    for _ in range(60):
        plan, _ = step(adm, waiting, running, budget)
        if any(item.seq is victims[1] for item in plan.scheduled):
            break
    stats = adm.last_prefill
    (item,) = plan.scheduled
    assert stats.cached_tokens == item.start and stats.new_tokens == item.num_new_tokens
    assert (stats.first_attempt_cached_tokens, stats.first_attempt_new_tokens) == (0, 0)
    assert stats.cache_hit_rate == 0.0
    cache2 = new_cache(capacity=256)
    serve(cache2, make_seq("warm", list(range(1, 21)), [1]))
    adm2 = RadixAdmission(cache2, "fcfs")
    small = StepBudget(max_num_seqs=4, max_num_batched_tokens=24)
    waiting, running = (
        deque([make_seq("a", list(range(1, 21)) + list(range(200, 240)), [1, 2])]),
        [],
    )
    step(adm2, waiting, running, small)  # a: 20 cached, a first chunk of 24 new tokens
    assert (adm2.last_prefill.cached_tokens, adm2.last_prefill.new_tokens) == (20, 24)
    waiting.append(make_seq("b", list(range(1, 21)) + [300, 301, 302], [1]))
    step(adm2, waiting, running, small)  # a's last 16 tokens (0 cached) + b (20 cached, 3 new)
    s = adm2.last_prefill
    assert (s.num_new_seqs, s.cached_tokens, s.new_tokens) == (1, 20, 16 + 3)
    assert s.cache_hit_rate == pytest.approx(20 / (20 + 19))


@pytest.mark.parametrize(("page_size", "boundary", "cached"), [(1, 10, 14), (4, 8, 12)])
def test_invariant_35_prompt_output_split(page_size, boundary, cached):
    cache = new_cache(page_size=page_size, capacity=64)
    prompt = list(range(1, 11))
    outputs = [11, 12, 13, 14, 15]
    serve(cache, make_seq("r", prompt, outputs))  # owns 14 tokens
    tree = cache.tree
    assert tree.total_size() == cached
    upper = node_at(tree, prompt[:boundary])
    assert upper.depth == boundary
    (tail,) = upper.children.values()
    assert tail.depth == cached and not tail.children
    assert tree.evict(1) == cached - boundary
    assert tree.match_prefix(K(prompt)).device_prefix_len == boundary


def test_invariant_36_uncapped_sort_pass_match():
    cache = _cached_cache([list(range(1, 151))])
    adm = RadixAdmission(cache, "lpm")
    y = make_seq("y", list(range(1, 100)) + [777, 778, 779])  # match 99, key 99
    x = make_seq("x", list(range(1, 101)))  # whole prompt inside the cached edge: split at 100
    waiting = deque([y, x])
    adm.policy.calc_priority(waiting)
    assert adm.policy.last_matches["x"].num_tokens == 100
    assert node_at(cache.tree, list(range(1, 101))).depth == 100
    assert [s.seq_id for s in waiting] == ["y", "x"]  # x's key is min(100, 99) = 99: a tie


def test_invariant_37_recency_order():
    tree = make_tree()
    for end in (4, 8, 12):
        tree.insert(K(list(range(1, end + 1))), list(range(end)), prev_prefix_len=end)
    before = tree.clock.peek()
    node = tree.match_prefix(K(list(range(1, 11)))).last_device_node
    while node.parent is not None:
        assert node.last_access_time > node.parent.last_access_time > before - 1
        node = node.parent
    fresh = make_tree()
    fresh.insert(K([50, 51, 52, 53]), [0, 1, 2, 3])
    leaf = fresh.insert(K([50, 51, 60]), [4, 5, 6], prev_prefix_len=2).last_device_node
    upper = leaf.parent
    (remainder,) = [c for c in upper.children.values() if c is not leaf]
    assert upper.last_access_time < remainder.last_access_time < leaf.last_access_time


def test_invariant_38_waiting_prefix_refresh():
    a_prompt, b_prompt, c_prompt = list(range(1, 11)), list(range(20, 30)), list(range(40, 50))
    cache = _cached_cache([a_prompt, b_prompt, c_prompt])
    adm = RadixAdmission(cache, "fcfs")
    leaf = {
        name: node_at(cache.tree, p + [9999])
        for name, p in (("a", a_prompt), ("b", b_prompt), ("c", c_prompt))
    }
    cache.tree.match_prefix(K(c_prompt + [9999]))  # C touched after A and B
    waiting = deque([make_seq("A", a_prompt + [9999, 1]), make_seq("B", b_prompt + [9999, 2])])
    adm.policy.calc_priority(waiting)
    t = {name: node.last_access_time for name, node in leaf.items()}
    assert t["a"] > t["b"] > t["c"]
    for _ in range(31):
        cache.tree.match_prefix(K(c_prompt + [9999]))
        adm.policy.calc_priority(waiting)
        assert leaf["c"].last_access_time > leaf["a"].last_access_time
    adm.policy.calc_priority(waiting)  # the 33rd eligible pass refreshes again
    assert leaf["a"].last_access_time > leaf["b"].last_access_time > leaf["c"].last_access_time


def test_slot_check_finds_a_double_free_that_hides_a_leak():
    """Page 1 frees are checked per slot only in debug mode: a slot held by nobody while a free
    slot is queued twice keeps the counts balanced, and the ownership count over arrays still
    names both (the paged allocator refuses the double free itself)."""
    cache = RadixCache(page_size=1, capacity_tokens=64)
    cache.check_integrity()
    cache.allocator.alloc(1)  # held by nobody
    cache.allocator.free(cache.allocator.free_pages()[-1:])  # a free slot, again
    with pytest.raises(CacheIntegrityError, match=r"owned twice \[\d+\] or missing: 63 of 64"):
        cache.check_integrity()
