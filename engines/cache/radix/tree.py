"""The radix tree of `UnifiedRadixCache` (full-attention component), docs/radix.md §1-§3.

Matching splits partly matched edges and stamps recency; insertion page-aligns its key, keeps the
tree's existing slots and frees the caller's duplicates; locks move tokens between the evictable and
protected counters; eviction removes whole unlocked leaves in policy order, cascading to parents.
Edges compare as packed int32 bytes (one memcmp per whole edge, a vectorised search for the first
mismatch in the one partly matched edge; one memcmp for a whole run of single-child nodes, runs.py);
slot ids are int32 arrays, and `path_device_suffix` returns only the slots past a position (what a
checkpoint rewrites).

Evictable leaves live in `EvictableLeaves` (leaves.py), a set with a persistent lazy queue; the tree
re-pushes a member whenever it changes a field the policy key reads (stamps, hit_count, priority).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from itertools import repeat
from operator import sub
from typing import NamedTuple, Protocol

import numpy as np

from engines.cache.radix.eviction import LRU, EvictionPolicy
from engines.cache.radix.key import (
    TOKEN_BYTES,
    TOKEN_DTYPE,
    RadixKey,
    make_child_key,
    namespace_of,
    unpack,
)
from engines.cache.radix.leaves import EvictableLeaves
from engines.cache.radix.node import TreeNode
from engines.cache.radix.recency import PROCESS_CLOCK, LogicalClock
from engines.cache.radix.runs import build_run, drop_run_of
from engines.cache.radix.slot_row import SLOT_DTYPE
from engines.cache.records import CacheIntegrityError

ANCESTOR_STAMP_STEP = (
    1e-5  # §2.1: parent of the stamped node gets t - 1e-5, grandparent t - 2e-5, ...
)
# k * ANCESTOR_STAMP_STEP for the first ancestors, computed once (the same floats as on the fly)
_STAMP_OFFSETS = tuple(k * ANCESTOR_STAMP_STEP for k in range(1, 1025))
_STAMP_FIELD = repeat("last_access_time")
_NO_SLOTS = np.empty(0, dtype=SLOT_DTYPE)


class MatchResult(NamedTuple):
    device_prefix_len: int
    last_device_node: TreeNode


class InsertResult(NamedTuple):
    prefix_len: int
    last_device_node: TreeNode


class TreeLock(NamedTuple):
    """Receipt of `lock`: the anchor node and the tokens that moved to protected."""

    node: TreeNode
    delta: int


class SlotAllocator(Protocol):
    """What the tree asks of the KV allocator whose slots its values hold."""

    def available_size(self) -> int: ...

    def free_segment(self, free_index: Sequence[int] | np.ndarray, start_pos: int = 0) -> None: ...


class UnifiedRadixTree:
    def __init__(
        self,
        page_size: int = 1,
        allocator: SlotAllocator | None = None,
        policy: EvictionPolicy | None = None,
        clock: LogicalClock = PROCESS_CLOCK,
        disable: bool = False,
    ) -> None:
        self.page_size = page_size
        self.allocator = allocator  # None: simulation (values are never freed)
        self.policy = policy or LRU()
        self.clock = clock
        self.disable = disable
        self.num_evicted_nodes = 0
        self.num_evicted_tokens = 0
        # A host tier's hook (engines/cache/radix/hicache.py): told of each leaf before it is
        # deleted. None without a tier.
        self.on_evict: Callable[[TreeNode], None] | None = None
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        self.root_node = TreeNode.make_root()
        self._evictable = 0
        self._protected = 0
        self.leaves = EvictableLeaves(self.policy)

    @property
    def evictable_leaves(self) -> set[TreeNode]:
        return self.leaves.nodes

    def evictable_size(self) -> int:
        return self._evictable

    def protected_size(self) -> int:
        return self._protected

    def total_size(self) -> int:
        return sum(len(node.value) for node in self.nodes())

    def nodes(self) -> Iterator[TreeNode]:
        """Every live node except the root (iterative DFS)."""
        stack = list(self.root_node.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def path_device_indices(self, node: TreeNode) -> np.ndarray:
        """Slot ids of the path root -> node, in token order."""
        return self.path_device_suffix(node, 0)

    def path_device_suffix(self, node: TreeNode, start: int) -> np.ndarray:
        """Slot ids of positions [start, node.depth) of the path root -> node: only the nodes that
        end beyond `start` are visited, so a checkpoint pays for its new tokens, not the context."""
        parts = []
        while node.parent is not None and node.depth > start:
            begin = node.depth - len(node.value)
            parts.append(node.value if begin >= start else node.value[start - begin :])
            node = node.parent
        if not parts:
            return _NO_SLOTS
        parts.reverse()
        return np.concatenate(parts)

    # --------------------------------------------------------------- matching
    def match_prefix(self, key: RadixKey) -> MatchResult:
        """Longest cached page-aligned prefix of `key` (limit applied); splits, stamps (§2.1)."""
        root = self.root_node
        if self.disable or len(key) == 0:
            return MatchResult(0, root)
        n = len(key) // self.page_size * self.page_size
        if n == 0:
            return MatchResult(0, root)
        pos, path = self._walk(key, n)
        self._stamp_path(path)
        return MatchResult(pos, path[-1])

    def touch_prefix(self, key: RadixKey) -> None:
        """The match walk (splits and stamps included) without a result (§8.8)."""
        self.match_prefix(key)

    def cut(self, key: RadixKey, n: int) -> None:
        """A node boundary at `n` on key's path (the match walk's split, no stamps): HiCache keeps
        the bounds of the host nodes a request loaded back (hicache.py)."""
        self._walk(key, n)

    def _walk(self, key: RadixKey, n: int) -> tuple[int, list[TreeNode]]:
        """Follow whole edges while they equal the key (one memcmp each, one for a whole run of
        single-child nodes, runs.py); split the first edge that matches only partly. Returns the
        matched length and the path root -> last matched node. A full child's depth is the next
        position."""
        ids, packed, namespace = key.token_ids, key.packed(), key.namespace
        node, pos, p = self.root_node, 0, self.page_size
        end = n * TOKEN_BYTES
        matches = packed.startswith
        path = [node]
        plain = p == 1 and namespace is None
        checked = 0  # depth a failed run reached: no new runs inside it (they'd steal its nodes)
        while pos < n:
            run = node.run
            if run is None and len(node.children) == 1 and node.depth >= checked and pos:
                run = build_run(node)  # never at the root: its children differ in namespace
            if run is not None:
                if matches(run.tokens, pos * TOKEN_BYTES, end):
                    path.extend(run.nodes)
                    node = run.nodes[-1]
                    pos = node.depth
                    continue
                checked = run.nodes[-1].depth
            child = node.children.get(
                ids[pos] if plain else make_child_key(ids, packed, pos, p, namespace)
            )
            if child is None:
                break
            if not matches(child.tokens, pos * TOKEN_BYTES, end):
                m = self._common_len(child.tokens, packed, pos, n)
                path.append(self._split(child, m))
                return pos + m, path
            pos = child.depth
            node = child
            path.append(node)
        return pos, path

    def _common_len(self, edge: bytes, packed: bytes, pos: int, n: int) -> int:
        """Length of the common prefix of an edge and key tokens [pos, n), in whole pages."""
        m = min(len(edge) // TOKEN_BYTES, n - pos)
        a = np.frombuffer(edge, dtype=TOKEN_DTYPE, count=m)
        b = np.frombuffer(packed, dtype=TOKEN_DTYPE, count=m, offset=pos * TOKEN_BYTES)
        differ = np.flatnonzero(a != b)
        i = int(differ[0]) if len(differ) else m
        return i // self.page_size * self.page_size

    def _stamp_path(self, path: list[TreeNode]) -> None:
        """Fresh stamp t on the path's last node, t - k * 1e-5 on its k-th ancestor, root included
        (§2.1); the stores run in C (map over the path), not one bytecode loop step per node.

        Only the last node can be an evictable leaf: every ancestor has a child on the path."""
        t = self.clock()
        node = path[-1]
        node.last_access_time = t
        if node.in_leaf_set:
            self.leaves.push(node)
        ancestors = reversed(path)
        next(ancestors)
        deque(map(setattr, ancestors, _STAMP_FIELD, map(sub, repeat(t), _STAMP_OFFSETS)), 0)
        k = len(_STAMP_OFFSETS)
        for node in path[-2 - k :: -1]:  # paths deeper than the table
            k += 1
            node.last_access_time = t - k * ANCESTOR_STAMP_STEP

    def _split(self, child: TreeNode, split_len: int) -> TreeNode:
        """Cut child after split_len tokens; the new upper node takes child's place (§2.2)."""
        drop_run_of(child)
        cut = split_len * TOKEN_BYTES
        parent = child.parent
        assert parent is not None  # matching splits below the root, never the root itself
        upper = TreeNode(
            child.tokens[:cut],
            child.key_extra,
            child.value[:split_len],
            parent,
            child.child_key,
        )
        upper.last_access_time = self.clock()
        upper.creation_time = child.creation_time  # unified tree: both halves keep the original's
        upper.lock_ref = child.lock_ref
        upper.priority = child.priority
        upper.hit_count = child.hit_count
        upper.depth = child.depth - (len(child.value) - split_len)
        upper.high_water = child.high_water
        parent.children[child.child_key] = upper
        child.tokens = child.tokens[cut:]
        child.value = child.value[split_len:]
        child.parent = upper
        first = unpack(child.tokens[: self.page_size * TOKEN_BYTES])
        child.child_key = make_child_key(
            first, child.tokens, 0, self.page_size, namespace_of(*child.key_extra)
        )
        upper.children[child.child_key] = child
        child.last_access_time = self.clock()  # re-stamped although not accessed
        if child.in_leaf_set:
            self.leaves.push(child)
        return upper

    # -------------------------------------------------------------- insertion
    def insert(
        self,
        key: RadixKey,
        value: np.ndarray | list[int] | None = None,
        priority: int = 0,
        inserted_len: int = 0,
        prev_prefix_len: int = 0,
        anchor: TreeNode | None = None,
    ) -> InsertResult:
        """Insert key -> value, page-aligned; existing nodes keep their slots (§2.3).

        The caller's slots for positions [prev_prefix_len, prefix_len) duplicate tree slots and are
        freed to the allocator here. hit_count counts nodes ending beyond inserted_len (§2.4).
        `anchor`: a node the caller holds locked whose path spells key[:anchor.depth] (a request's
        own last checkpoint); the walk over that path is done in bulk with the same effects.
        """
        root = self.root_node
        if self.disable:
            return InsertResult(0, root)
        simulated = value is None or self.allocator is None
        ids, packed, namespace = key.token_ids, key.packed(), key.namespace
        n = len(key) // self.page_size * self.page_size
        if value is None:  # simulation: the token ids stand in for slots
            value = np.frombuffer(packed, dtype=TOKEN_DTYPE)
        value = np.asarray(value, SLOT_DTYPE)
        root.last_access_time = self.clock()
        root.priority = max(root.priority, priority)
        node, pos, p = root, 0, self.page_size
        plain = p == 1 and namespace is None
        end = n * TOKEN_BYTES
        if anchor is not None and anchor.lock_ref > 0 and anchor.depth <= min(n, inserted_len):
            node, pos = anchor, self._walk_locked_path(anchor, n, priority)
        while pos < n:
            child = node.children.get(
                ids[pos] if plain else make_child_key(ids, packed, pos, p, namespace)
            )
            if child is None:
                break
            if packed.startswith(child.tokens, pos * TOKEN_BYTES, end):
                pos = child.depth
                child.last_access_time = self.clock()
            else:
                m = self._common_len(child.tokens, packed, pos, n)
                child = self._split(child, m)
                pos += m
            child.priority = max(child.priority, priority)
            if pos > inserted_len:
                child.hit_count += 1
            child.high_water = max(child.high_water, n)
            if child.in_leaf_set:
                self.leaves.push(child)
            node = child
        prefix_len = pos
        if not simulated and prev_prefix_len < prefix_len and self.allocator is not None:
            self.allocator.free_segment(value[prev_prefix_len:prefix_len], prev_prefix_len)
        if pos == n:
            return InsertResult(prefix_len, node)
        leaf = TreeNode(
            packed[pos * TOKEN_BYTES : end],
            key.extras,
            value[pos:n].copy(),
            node,
            make_child_key(ids, packed, pos, p, namespace),
        )
        leaf.last_access_time = self.clock()
        leaf.creation_time = self.clock()
        leaf.priority = priority
        leaf.hit_count = 1 if n > inserted_len else 0
        leaf.depth = leaf.high_water = n
        node.children[leaf.child_key] = leaf
        self._evictable += n - pos
        if node.in_leaf_set:
            self.leaves.leave(node)
        self.leaves.enter(leaf)
        return InsertResult(prefix_len, leaf)

    def _walk_locked_path(self, anchor: TreeNode, n: int, priority: int) -> int:
        """What insert's walk does to the nodes root -> anchor, minus the edge compares and child
        lookups: a fresh stamp each in path order, priority and high_water raised. No hit_count
        (they end at or before inserted_len), no leaf-set push (locked nodes are never in it), no
        split (the path spells the key). A request committing every step (vLLM's scheduler)
        still pays O(path), but a few bytecodes a node."""
        path = []
        node = anchor
        while node.parent is not None:
            path.append(node)
            node = node.parent
        clock = self.clock
        if isinstance(clock, LogicalClock):
            t = clock.peek()
            for node in reversed(path):
                node.last_access_time = t
                t += 1.0  # the clock's own arithmetic, so the same floats
                if node.priority < priority:
                    node.priority = priority
                if node.high_water < n:
                    node.high_water = n
            clock.resume(t)
        else:
            for node in reversed(path):
                node.last_access_time = clock()
                node.priority = max(node.priority, priority)
                node.high_water = max(node.high_water, n)
        return anchor.depth

    # ---------------------------------------------------------------- locking
    def inc_lock_ref(self, node: TreeNode) -> int:
        """Lock root -> node (root excluded); returns the tokens moved to protected (§2.5)."""
        if self.disable:
            return 0
        delta = 0
        while node.parent is not None:
            if node.lock_ref == 0:
                size = len(node.value)
                self._evictable -= size
                self._protected += size
                delta += size
                if node.in_leaf_set:
                    self.leaves.leave(node)
            node.lock_ref += 1
            node = node.parent
        return delta

    def dec_lock_ref(self, node: TreeNode) -> int:
        """Undo one `inc_lock_ref(node)`; returns the tokens moved back to evictable."""
        if self.disable:
            return 0
        delta = 0
        while node.parent is not None:
            if node.lock_ref <= 0:
                raise CacheIntegrityError(f"unlock of an unlocked node {node!r}")
            node.lock_ref -= 1
            if node.lock_ref == 0:
                size = len(node.value)
                self._evictable += size
                self._protected -= size
                delta += size
                if not node.children:
                    self.leaves.enter(node)
            node = node.parent
        return delta

    def lock(self, node: TreeNode) -> TreeLock:
        return TreeLock(node, self.inc_lock_ref(node))

    def unlock(self, lock: TreeLock) -> None:
        self.dec_lock_ref(lock.node)

    def relock(self, lock: TreeLock, node: TreeNode) -> TreeLock:
        """`unlock(lock)` then `lock(node)`. When node lies strictly below lock.node, the pair
        leaves root -> lock.node as it was (each has a child on the path, so no leaf-set change),
        and only the nodes in between are locked: O(new nodes), not O(path). Its delta counts
        those nodes' tokens only."""
        below = []
        cur: TreeNode | None = node
        top = lock.node
        while cur is not None and cur is not top and cur.depth > top.depth:
            below.append(cur)
            cur = cur.parent
        if self.disable or cur is not top or not below:
            self.unlock(lock)
            return self.lock(node)
        delta = 0
        for cur in below:
            if cur.lock_ref == 0:
                size = len(cur.value)
                self._evictable -= size
                self._protected += size
                delta += size
                if cur.in_leaf_set:
                    self.leaves.leave(cur)
            cur.lock_ref += 1
        return TreeLock(node, delta)

    # --------------------------------------------------------------- eviction
    def evict(self, num_tokens: int) -> int:
        """Evict whole leaves in policy order until >= num_tokens are freed (§2.6)."""
        if self.disable:
            return 0
        evicted = 0
        while evicted < num_tokens:
            leaf = self.leaves.pop_min()
            if leaf is None:
                break
            evicted += self._delete_leaf(leaf)
        return evicted

    def evict_for_alloc(self, shortfall: int) -> int:
        """Evict until the allocator has shortfall more tokens available than now (§2.6, §5.4)."""
        if self.disable or self.allocator is None:
            return 0
        target = self.allocator.available_size() + shortfall
        evicted = 0
        while self.allocator.available_size() < target:
            leaf = self.leaves.pop_min()
            if leaf is None:
                break
            evicted += self._delete_leaf(leaf)
        return evicted

    def _delete_leaf(self, leaf: TreeNode) -> int:
        size = len(leaf.value)
        if self.on_evict is not None:
            self.on_evict(leaf)
        if self.allocator is not None:
            self.allocator.free_segment(leaf.value, leaf.depth - size)
        parent = leaf.parent
        assert parent is not None  # a leaf in the evictable set is attached
        if leaf.run_owner is not None:
            drop_run_of(leaf)
        del parent.children[leaf.child_key]
        self._evictable -= size
        self.leaves.leave(leaf)
        leaf.parent = None
        self.num_evicted_nodes += 1
        self.num_evicted_tokens += size
        if parent.parent is not None and parent.lock_ref == 0 and not parent.children:
            self.leaves.enter(parent)  # cascade: may go in this same call
        return size
