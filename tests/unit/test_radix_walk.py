"""The match walk's shortcuts and the leaf queue change no result (runs.py, leaves.py).

A tree whose walk may take runs of single-child nodes and one that walks edge by edge go through
the same random inserts, matches, locks and evictions (page sizes 1 and 2, two namespaces, every
policy); after each operation both trees are identical node by node: edges, slots, stamps, hit
counts, locks and leaf-set membership. The leaf queue (sorted deque plus heap) pops the member with
the smallest (policy key, stamp, latest push), as one heap over every push does.
"""

from __future__ import annotations

import random

import pytest

import engines.cache.radix.tree as tree_module
from engines.cache.radix.eviction import EVICTION_POLICIES, make_eviction_policy
from engines.cache.radix.key import RadixKey
from engines.cache.radix.leaves import EvictableLeaves
from engines.cache.radix.recency import LogicalClock
from engines.cache.radix.tree import UnifiedRadixTree
from tests.radix_support import RecordingAllocator


def _snapshot(tree: UnifiedRadixTree) -> list[tuple]:
    rows, stack = [], [(0, tree.root_node)]
    while stack:
        level, node = stack.pop()
        rows.append(
            (
                level,
                node.tokens,
                node.key_extra,
                node.value.tolist(),
                node.last_access_time,
                node.creation_time,
                node.hit_count,
                node.lock_ref,
                node.priority,
                node.depth,
                node.high_water,
                node.in_leaf_set,
            )
        )
        children = sorted(node.children.items(), key=lambda kv: repr(kv[0]), reverse=True)
        stack.extend((level + 1, child) for _, child in children)
    return rows + [(tree.evictable_size(), tree.protected_size())]


def _run_op(tree: UnifiedRadixTree, locks: list, kind: str, arg) -> object:
    if kind == "insert":
        key, priority = arg
        return tree.insert(key, priority=priority).prefix_len
    if kind == "match":
        return tree.match_prefix(arg).device_prefix_len
    if kind == "lock":
        locks.append(tree.lock(tree.match_prefix(arg).last_device_node))
        return len(locks)
    if kind == "unlock":
        tree.unlock(locks.pop(arg))
        return len(locks)
    return tree.evict(arg)


class _Pair:
    """One operation applied to a tree with runs and to one walking edge by edge."""

    def __init__(self, page_size: int, policy: str, monkeypatch) -> None:
        self.monkeypatch = monkeypatch
        self.trees = [
            UnifiedRadixTree(
                page_size, RecordingAllocator(), make_eviction_policy(policy), LogicalClock()
            )
            for _ in range(2)
        ]
        self.locks: list[list] = [[], []]

    def apply(self, kind: str, arg) -> None:
        got = _run_op(self.trees[0], self.locks[0], kind, arg)
        with self.monkeypatch.context() as patch:
            patch.setattr(tree_module, "build_run", lambda node: None)
            want = _run_op(self.trees[1], self.locks[1], kind, arg)
        assert got == want
        assert _snapshot(self.trees[0]) == _snapshot(self.trees[1])


def _random_key(rng: random.Random, stems: list[list[int]]) -> RadixKey:
    stem = rng.choice(stems)
    tail = [rng.randrange(3) for _ in range(rng.randrange(12))]
    return RadixKey(stem[: rng.randrange(len(stem) + 1)] + tail, rng.choice([None, None, "lora"]))


@pytest.mark.parametrize("page_size", [1, 2])
@pytest.mark.parametrize("policy", ["lru", "lfu", "fifo", "mru", "priority", "tlru"])
def test_runs_change_no_tree_state(page_size, policy, monkeypatch):
    rng = random.Random(page_size * 100 + EVICTION_POLICIES.names().index(policy))
    stems = [[rng.randrange(4) for _ in range(rng.randrange(20, 80))] for _ in range(4)]
    pair = _Pair(page_size, policy, monkeypatch)
    used_runs = 0
    for _ in range(400):
        key, roll = _random_key(rng, stems), rng.random()
        if roll < 0.35:
            pair.apply("insert", (key, rng.randrange(3)))
        elif roll < 0.75:
            pair.apply("match", key)
        elif roll < 0.85:
            pair.apply("lock", key)
        elif roll < 0.92 and pair.locks[0]:
            pair.apply("unlock", rng.randrange(len(pair.locks[0])))
        else:
            pair.apply("evict", rng.randrange(1, 30))
        used_runs += any(node.run is not None for node in pair.trees[0].nodes())
    assert used_runs > 50  # the shortcut was there to take, not only the edge-by-edge walk


class _Node:
    """A stand-in for TreeNode with the fields the queue and the policies read."""

    def __init__(self, i: int) -> None:
        self.last_access_time = 0.0
        self.creation_time = float(i)
        self.hit_count = self.priority = self.depth = self.high_water = 0
        self.value = [0]
        self.in_leaf_set = False
        self.heap_serial = None


@pytest.mark.parametrize("policy", sorted(EVICTION_POLICIES.names()))
def test_leaf_queue_pops_the_smallest_key_then_stamp_then_latest_push(policy):
    rng = random.Random(len(policy))
    leaves = EvictableLeaves(make_eviction_policy(policy))
    nodes = [_Node(i) for i in range(40)]
    pushed_at: dict[int, int] = {}
    clock = 0.0
    for step in range(3000):
        node = rng.choice(nodes)
        roll = rng.random()
        if roll < 0.45:  # a fresh stamp (mostly increasing), sometimes an old one
            clock += 1.0
            node.last_access_time = clock if rng.random() < 0.8 else rng.randrange(int(clock) + 1)
            node.hit_count += rng.random() < 0.3
            if node.in_leaf_set:
                leaves.push(node)
            else:
                leaves.enter(node)
            pushed_at[id(node)] = step
        elif roll < 0.6 and node.in_leaf_set:
            leaves.leave(node)
        elif roll < 0.8 and leaves.nodes:
            policy_key = leaves.policy.key
            want = min(
                leaves.nodes, key=lambda n: (policy_key(n), n.last_access_time, pushed_at[id(n)])
            )
            got = leaves.pop_min()
            assert got is want
            leaves.leave(got)
        assert leaves.num_entries() <= 2 * len(leaves) + 1024
