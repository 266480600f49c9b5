"""The evictable-leaf set with a persistent, lazily invalidated queue (docs/radix.md §1.4, §2.6).

Upstream rebuilds a heap over every evictable leaf on each `evict` (70-77 ms at ~41k leaves,
#38454). Here a leaf is pushed when it enters the set and re-pushed whenever a field its policy key
reads changes; a popped entry counts only if it is the node's latest push (`heap_serial`) and the
node is still in the set. Stale entries are dropped by a rebuild once they outnumber live ones.
Entries: (policy key, last_access_time, serial, node); the serial is unique, so nodes are never
compared and ties fall to the older stamp, as upstream's node ordering does. Where the policy's key
already orders by the stamp (`stamp_decides_ties`) the entry leaves it out: (key, serial, node) pops
in the same order.

The queue is a sorted deque plus a heap: an entry not below the deque's last one is appended (LRU
stamps come from a monotone clock, so most pushes land there in O(1)), any other goes to the heap,
and a pop takes the smaller of the two heads: the same order as one heap, with a small heap.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any

from engines.cache.radix.eviction import EvictionPolicy
from engines.cache.radix.node import TreeNode

_COMPACT_SLACK = 1024


class EvictableLeaves:
    def __init__(self, policy: EvictionPolicy) -> None:
        self.policy = policy
        self.nodes: set[TreeNode] = set()
        self._heap: list[tuple[Any, ...]] = []
        self._sorted: deque[tuple[Any, ...]] = (
            deque()
        )  # entries in increasing order, pushed in that order
        self._serial = 0
        self._with_stamp = not policy.stamp_decides_ties

    def __len__(self) -> int:
        return len(self.nodes)

    def num_entries(self) -> int:
        """Queued entries, stale ones included (bounded by 2 * members + a slack)."""
        return len(self._heap) + len(self._sorted)

    def clear(self) -> None:
        self.nodes = set()
        self._heap = []
        self._sorted = deque()

    def enter(self, node: TreeNode) -> None:
        if not node.in_leaf_set:
            node.in_leaf_set = True
            self.nodes.add(node)
            self.push(node)

    def leave(self, node: TreeNode) -> None:
        node.in_leaf_set = False
        node.heap_serial = None
        self.nodes.discard(node)

    def push(self, node: TreeNode) -> None:
        """(Re-)queue a member whose key may have changed; older entries become stale."""
        self._serial += 1
        node.heap_serial = self._serial
        entry = self._entry(node)
        ordered = self._sorted
        if not ordered or ordered[-1] < entry:
            ordered.append(entry)
        else:
            heapq.heappush(self._heap, entry)
        if len(self._heap) + len(ordered) > 2 * len(self.nodes) + _COMPACT_SLACK:
            self._compact()

    def _entry(self, node: TreeNode) -> tuple[Any, ...]:
        if self._with_stamp:
            return (self.policy.key(node), node.last_access_time, self._serial, node)
        return (self.policy.key(node), self._serial, node)

    def pop_min(self) -> TreeNode | None:
        """The member with the smallest current key (it stays a member until the caller deletes it)."""
        heap, ordered = self._heap, self._sorted
        while ordered or heap:
            if ordered and (not heap or ordered[0] < heap[0]):
                entry = ordered.popleft()
            else:
                entry = heapq.heappop(heap)
            node: TreeNode = entry[-1]
            if node.in_leaf_set and node.heap_serial == entry[-2]:
                return node
        return None

    def _compact(self) -> None:
        entries = []
        for node in self.nodes:
            self._serial += 1
            node.heap_serial = self._serial
            entries.append(self._entry(node))
        entries.sort()
        self._sorted = deque(entries)
        self._heap = []
