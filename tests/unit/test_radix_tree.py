"""The radix tree and its keys (docs/radix.md §1-§3): matching, splitting, stamping, insertion,
locks, eviction order under every policy, and the persistent heap behind eviction."""

from __future__ import annotations

import pytest

from engines.cache.radix.allocator import PagedTokenToKVPoolAllocator
from engines.cache.radix.eviction import EVICTION_POLICIES, make_eviction_policy
from engines.cache.radix.key import RadixKey as K
from engines.cache.radix.key import pack, packed_tokens
from engines.cache.radix.recency import LogicalClock
from engines.cache.radix.tree import ANCESTOR_STAMP_STEP, UnifiedRadixTree
from engines.registry import UnknownNameError
from tests.radix_support import RecordingAllocator


def make_tree(page_size=1, policy="lru", allocator=None, **params):
    return UnifiedRadixTree(
        page_size,
        allocator or RecordingAllocator(),
        make_eviction_policy(policy, **params),
        LogicalClock(),
    )


def node_at(tree, tokens):
    return tree.match_prefix(K(tokens)).last_device_node


# ------------------------------------------------------------------ keys (§1.1, §1.3)
def test_key_limit_slicing_and_alignment():
    key = K([1, 2, 3, 4, 5, 6, 7], extra_key="e", cache_salt="s", limit=5)
    assert len(key) == 5 and list(key) == [1, 2, 3, 4, 5]
    part = key[1:3]
    assert part.ids() == [2, 3] and (part.extra_key, part.cache_salt, part.limit) == (
        "e",
        "s",
        None,
    )
    assert key[0].ids() == [1]
    assert key.page_aligned(4).ids() == [1, 2, 3, 4]
    assert K([1, 2, 3]).page_aligned(4).ids() == []


@pytest.mark.parametrize(
    ("key", "page_size", "expected"),
    [
        (K([7, 8, 9]), 1, 7),
        (K([7, 8, 9]), 2, pack([7, 8])),
        (K([7, 8], extra_key="lora"), 1, ("lora", 7)),
        (K([7, 8], cache_salt="s"), 1, ((None, "s"), 7)),
        (K([7, 8], extra_key="x", cache_salt="s"), 2, (("x", "s"), pack([7, 8]))),
    ],
)
def test_child_keys(key, page_size, expected):
    assert key.child_key(page_size) == expected


# --------------------------------------------------------------- matching (§2.1, §2.2)
def test_match_applies_limit_then_page_alignment():
    tree = make_tree(page_size=4)
    tree.insert(K(list(range(1, 13))), list(range(12)))
    assert tree.match_prefix(K(list(range(1, 13)), limit=11)).device_prefix_len == 8
    assert tree.match_prefix(K(list(range(1, 13)), limit=3)).device_prefix_len == 0
    assert [len(n.value) for n in tree.nodes()] == [8, 4]  # split at 8 by the limited match


def test_split_copies_fields_and_values():
    tree = make_tree()
    tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13], priority=5)
    leaf = node_at(tree, [1, 2, 3, 4])
    tree.inc_lock_ref(leaf)
    upper = tree.match_prefix(K([1, 2, 9])).last_device_node
    assert upper.key.ids() == [1, 2] and upper.value.tolist() == [10, 11]
    assert (upper.lock_ref, upper.priority, upper.hit_count) == (1, 5, 1)
    assert upper.creation_time == leaf.creation_time
    assert leaf.key.ids() == [3, 4] and leaf.value.tolist() == [12, 13] and leaf.parent is upper
    upper.value[:] = 99  # disjoint from the remainder's slots
    assert leaf.value.tolist() == [12, 13]


def test_split_during_match_leaves_remainder_older_than_upper():
    tree = make_tree()
    tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13])
    upper = tree.match_prefix(K([1, 2])).last_device_node
    (remainder,) = upper.children.values()
    assert remainder.last_access_time < upper.last_access_time
    assert tree.root_node.last_access_time < upper.last_access_time


def test_touch_prefix_splits_and_stamps():
    tree = make_tree()
    tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13])
    tree.insert(K([7]), [20])
    assert tree.touch_prefix(K([1, 2, 3])) is None
    assert node_at(tree, [1, 2, 3]).key.ids() == [1, 2, 3]
    assert tree.evict(1) == 1 and tree.match_prefix(K([7])).device_prefix_len == 0


# -------------------------------------------------------------------- insert (§2.3, §2.4)
def test_insert_without_values_uses_token_ids_and_frees_nothing():
    alloc = RecordingAllocator()
    tree = make_tree(allocator=alloc)
    tree.insert(K([5, 6, 7]))
    tree.insert(K([5, 6, 8]))
    assert alloc.freed == []
    assert tree.path_device_indices(node_at(tree, [5, 6, 8])).tolist() == [5, 6, 8]


def test_insert_frees_only_duplicates_at_or_beyond_prev_prefix_len():
    alloc = RecordingAllocator()
    tree = make_tree(allocator=alloc)
    tree.insert(K([1, 2, 3, 4]), [10, 11, 12, 13])
    result = tree.insert(K([1, 2, 3, 4, 5]), [10, 11, 22, 23, 24], prev_prefix_len=2)
    assert result.prefix_len == 4 and alloc.freed == [22, 23]
    assert result.last_device_node.value.tolist() == [24]


def test_insert_touches_root_and_raises_its_priority():
    tree = make_tree()
    tree.insert(K([1]), [1], priority=7)
    assert tree.root_node.priority == 7
    t = tree.root_node.last_access_time
    tree.insert(K([2]), [2])
    assert tree.root_node.last_access_time > t


def test_insert_stamps_deeper_nodes_newer():
    tree = make_tree()
    tree.insert(K([1, 2]), [1, 2])
    tree.insert(K([1, 2, 3, 4]), [1, 2, 3, 4], prev_prefix_len=2)
    tree.insert(K([9]), [9])
    tree.insert(K([1, 2, 3, 4]), [1, 2, 3, 4], prev_prefix_len=4)
    top, bottom = node_at(tree, [1, 2]), node_at(tree, [1, 2, 3, 4])
    tree.insert(K([1, 2, 3, 4]), [1, 2, 3, 4], prev_prefix_len=4)
    assert bottom.last_access_time > top.last_access_time > node_at(tree, [9]).last_access_time - 10


def test_hit_count_on_split_counts_only_the_upper_node():
    tree = make_tree()
    tree.insert(K([1, 2, 3, 4]), [1, 2, 3, 4])
    tree.insert(K([1, 2]), [1, 2], prev_prefix_len=2)  # another request, stops inside the edge
    upper = node_at(tree, [1, 2])
    (lower,) = upper.children.values()
    assert (upper.hit_count, lower.hit_count) == (2, 1)


def test_insert_into_disabled_tree_is_a_miss():
    tree = make_tree()
    tree.disable = True
    assert tree.insert(K([1, 2]), [1, 2]).prefix_len == 0
    assert tree.inc_lock_ref(tree.root_node) == 0 and tree.evict(10) == 0
    assert tree.total_size() == 0


# ------------------------------------------------------------------ eviction (§2.6, §2.7)
def test_evict_returns_less_when_the_tree_runs_out():
    tree = make_tree()
    tree.insert(K([1, 2]), [1, 2])
    assert tree.evict(100) == 2
    assert tree.evict(5) == 0


def test_evict_for_alloc_with_pages_stops_at_the_target():
    alloc = PagedTokenToKVPoolAllocator(32, 4)
    tree = UnifiedRadixTree(4, alloc, clock=LogicalClock())
    for first in (1, 2, 3):
        tree.insert(K([first] * 8), alloc.alloc(8))
    alloc.alloc(alloc.available_size())
    assert tree.evict_for_alloc(4) == 8  # one whole 8-token leaf; the target was +4
    assert alloc.available_size() == 8 and tree.total_size() == 16


def test_mru_heap_follows_keys_that_decrease():
    alloc = RecordingAllocator()
    tree = make_tree(policy="mru", allocator=alloc)
    for i in range(5):
        tree.insert(K([i]), [i])
    for i in (2, 0, 3):
        tree.match_prefix(K([i]))
    tree.evict(3)
    assert alloc.freed == [3, 0, 2]


def test_many_touches_keep_the_heap_bounded_and_correct():
    alloc = RecordingAllocator()
    tree = make_tree(allocator=alloc)
    for i in range(50):
        tree.insert(K([i]), [i])
    for r in range(5000):
        tree.match_prefix(K([r % 49]))
    assert tree.leaves.num_entries() <= 2 * 50 + 1024
    last_touch = {r % 49: r for r in range(5000)}
    tree.evict(2)
    assert alloc.freed == [49, min(last_touch, key=last_touch.get)]  # 49 was never touched


def test_tlru_defaults_equal_lru_and_tail_safe_leaves_go_first():
    def first_victim(policy, **params):
        alloc = RecordingAllocator()
        tree = make_tree(policy=policy, allocator=alloc, **params)
        tree.insert(K(list(range(20, 30))), list(range(20, 30)))  # d 10, len 10: never tail-safe
        tree.insert(K([1, 2, 3, 4, 5, 6]), [1, 2, 3, 4, 5, 6])
        tree.insert(K([1, 2, 3, 7]), [1, 2, 3, 7], prev_prefix_len=3)  # [4,5,6]: d - len = 3
        tree.evict(1)
        return alloc.freed

    assert first_victim("tlru") == first_victim("lru") == list(range(20, 30))
    # threshold 3: [4,5,6] has 3 >= max(6 - 3, 0), [7] has 3 >= max(4 - 3, 0); [20..29] has not
    assert first_victim("tlru", threshold=3) == [4, 5, 6]


def test_unknown_eviction_policy_lists_the_valid_ones():
    assert EVICTION_POLICIES.names() == [
        "fifo",
        "filo",
        "lfu",
        "lru",
        "mru",
        "priority",
        "slru",
        "tlru",
    ]
    with pytest.raises(UnknownNameError, match="valid: fifo, filo, lfu, lru"):
        make_eviction_policy("arc")


def test_reset_gives_a_fresh_root():
    tree = make_tree()
    tree.insert(K([1, 2]), [1, 2])
    tree.inc_lock_ref(node_at(tree, [1, 2]))
    tree.reset()
    root = tree.root_node
    assert root.lock_ref == 1 and not root.children and len(root.value) == 0
    assert (tree.evictable_size(), tree.protected_size(), len(tree.evictable_leaves)) == (0, 0, 0)


# ------------------------------------------------------- compact keys and the suffix fetch
def test_path_suffix_is_the_tail_of_the_path_for_every_start():
    tree = make_tree()
    tree.insert(K(list(range(1, 13))), list(range(101, 113)))
    tree.insert(K([1, 2, 3, 50, 51]), [101, 102, 103, 150, 151], prev_prefix_len=3)
    tree.match_prefix(K([1, 2, 3, 4, 5, 6, 9]))  # splits the long edge at 6
    for tokens in ([1, 2, 3, 50, 51], list(range(1, 13))):
        node = node_at(tree, tokens)
        path = tree.path_device_indices(node).tolist()
        assert node.depth == len(path) == len(tokens)
        for start in range(len(path) + 2):
            assert tree.path_device_suffix(node, start).tolist() == path[start:]


def test_edges_hold_packed_int32_tokens_and_keys_rebuild_on_demand():
    tree = make_tree()
    tree.insert(K([5, -3, 70000, 2**31 - 1], extra_key="x", cache_salt="s"), [1, 2, 3, 4])
    (node,) = tree.root_node.children.values()
    assert node.tokens == pack([5, -3, 70000, 2**31 - 1]) and len(node.tokens) == 16
    assert (node.key.ids(), node.key.extra_key, node.key.cache_salt) == (
        [5, -3, 70000, 2**31 - 1],
        "x",
        "s",
    )


def test_first_mismatch_inside_an_edge_is_found_at_any_position():
    for cut in range(1, 40):
        tree = make_tree()
        ids = list(range(1, 41))
        tree.insert(K(ids), list(range(40)))
        probe = ids[:cut] + [999]
        assert tree.match_prefix(K(probe)).device_prefix_len == cut
        assert sorted(len(n.value) for n in tree.nodes()) == sorted([cut, 40 - cut])


def test_key_head_slices_share_ids_and_packed_form():
    ids = list(range(1, 9))
    key = K(ids, extra_key="e", limit=6)
    packed = key.packed()
    head = key[:4]
    assert head.token_ids is ids and head.packed() is packed and head.ids() == [1, 2, 3, 4]
    assert key[:10].ids() == [1, 2, 3, 4, 5, 6]  # never beyond the limit
    assert key[2:4].ids() == [3, 4] and key[2:4].limit is None


def test_packed_tokens_extends_an_appended_list_and_rebuilds_a_changed_one():
    owner = type("Owner", (), {})()
    ids = [1, 2, 3]
    assert packed_tokens(owner, ids) == pack([1, 2, 3])
    ids += [4, 5]
    assert packed_tokens(owner, ids) == pack([1, 2, 3, 4, 5])
    assert packed_tokens(owner, [9, 8]) == pack([9, 8])  # shorter: not an extension
    assert packed_tokens(owner, [9, 7, 6]) == pack([9, 7, 6])  # last token differs: rebuilt
    assert packed_tokens(type("Other", (), {})(), [4]) == pack([4])  # one entry per owner


def test_ancestor_stamps_past_the_offset_table_follow_the_same_formula():
    tree = make_tree()
    ids = list(range(1, 1202))
    for end in range(1, len(ids) + 1):  # a chain of 1201 one-token nodes
        tree.insert(K(ids[:end]), list(range(end)), prev_prefix_len=end - 1)
    node = tree.match_prefix(K(ids)).last_device_node
    t = node.last_access_time
    k = 0
    while node is not None:
        assert node.last_access_time == t - k * ANCESTOR_STAMP_STEP, k
        node, k = node.parent, k + 1
    assert k == 1202  # root included
