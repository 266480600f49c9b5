"""The per-step checkpoint shortcut (insert with an `anchor`, `relock`) leaves the tree exactly as
the plain walk (insert from the root, unlock then lock) does: every node's stamps, priority,
high_water, hit_count and lock count, the size counters, the clock and the eviction order."""

from __future__ import annotations

import random

import pytest

from engines.cache.radix.eviction import make_eviction_policy
from engines.cache.radix.key import RadixKey as K
from engines.cache.radix.recency import LogicalClock
from engines.cache.radix.tree import TreeLock, UnifiedRadixTree
from tests.radix_support import RecordingAllocator


def snapshot(tree: UnifiedRadixTree) -> list[tuple]:
    fields = ("last_access_time", "priority", "high_water", "hit_count", "lock_ref", "depth")
    rows = [
        (node.tokens, node.value.tobytes(), *(getattr(node, f) for f in fields))
        for node in tree.nodes()
    ]
    return sorted(rows) + [(tree.evictable_size(), tree.protected_size(), tree.clock.peek())]


def run(fast: bool, page_size: int, policy: str, seed: int) -> tuple[list[tuple], list[int]]:
    """Three requests sharing a prefix commit one token (page) per step, each holding one lock,
    with a priority that changes mid-way; then all finish and the tree is evicted leaf by leaf."""
    tree = UnifiedRadixTree(
        page_size, RecordingAllocator(), make_eviction_policy(policy), LogicalClock(7.0)
    )
    rng = random.Random(seed)
    shared = [rng.randrange(50) for _ in range(8 * page_size)]
    seqs = [shared + [rng.randrange(50) for _ in range(40 * page_size)] for _ in range(3)]
    locks: list[TreeLock | None] = [None, None, None]
    inserted = [0, 0, 0]
    for step in range(2, 48):
        for r, ids in enumerate(seqs):
            n = step * page_size
            held = locks[r]
            anchor = held.node if (fast and held is not None) else None
            priority = 1 if step > 30 and r == 1 else 0
            res = tree.insert(K(ids[:n]), None, priority, inserted[r], 0, anchor=anchor)
            inserted[r] = max(inserted[r], n)
            last = res.last_device_node
            if held is None:
                locks[r] = tree.lock(last)
            elif fast:
                locks[r] = tree.relock(held, last)
            else:
                tree.unlock(held)
                locks[r] = tree.lock(last)
        if step == 20:  # another request splits edges on the locked paths
            tree.insert(K(shared[: 3 * page_size] + [99] * page_size))
    state = snapshot(tree)
    for lock in locks:
        assert lock is not None
        tree.unlock(lock)
    order = []
    while (leaf := tree.leaves.pop_min()) is not None:
        order.append(leaf.depth)
        tree._delete_leaf(leaf)
    return state, order


@pytest.mark.parametrize("policy", ["lru", "lfu", "priority", "tlru"])
@pytest.mark.parametrize("page_size", [1, 4])
def test_anchored_insert_and_relock_match_the_plain_walk(page_size, policy):
    for seed in range(3):
        assert run(True, page_size, policy, seed) == run(False, page_size, policy, seed)
