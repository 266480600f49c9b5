"""The evictable-leaf set with a persistent, lazily invalidated heap (docs/radix.md §1.4, §2.6).

Upstream rebuilds a heap over every evictable leaf on each `evict` (70-77 ms at ~41k leaves,
#38454). Here a leaf is pushed when it enters the set and re-pushed whenever a field its policy key
reads changes; a popped entry counts only if it is the node's latest push (`heap_serial`) and the
node is still in the set. Stale entries are dropped by a rebuild once they outnumber live ones.
Heap entries: (policy key, last_access_time, serial, node); the serial is unique, so nodes are never
compared and ties fall to the older stamp, as upstream's node ordering does. Where the policy's key
already orders by the stamp (`stamp_decides_ties`) the entry leaves it out: (key, serial, node) pops
in the same order with one comparison less per heap level.
"""

from __future__ import annotations

import heapq

from engines.cache.radix.node import TreeNode
from engines.cache.radix.policies import EvictionPolicy

_COMPACT_SLACK = 1024


class EvictableLeaves:
    def __init__(self, policy: EvictionPolicy) -> None:
        self.policy = policy
        self.nodes: set[TreeNode] = set()
        self._heap: list[tuple] = []
        self._serial = 0
        self._with_stamp = not policy.stamp_decides_ties

    def __len__(self) -> int:
        return len(self.nodes)

    def clear(self) -> None:
        self.nodes = set()
        self._heap = []

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
        heapq.heappush(self._heap, self._entry(node))
        if len(self._heap) > 2 * len(self.nodes) + _COMPACT_SLACK:
            self._compact()

    def _entry(self, node: TreeNode) -> tuple:
        if self._with_stamp:
            return (self.policy.key(node), node.last_access_time, self._serial, node)
        return (self.policy.key(node), self._serial, node)

    def pop_min(self) -> TreeNode | None:
        """The member with the smallest current key (it stays a member until the caller deletes it)."""
        heap = self._heap
        while heap:
            entry = heapq.heappop(heap)
            node = entry[-1]
            if node.in_leaf_set and node.heap_serial == entry[-2]:
                return node
        return None

    def _compact(self) -> None:
        entries = []
        for node in self.nodes:
            self._serial += 1
            node.heap_serial = self._serial
            entries.append(self._entry(node))
        heapq.heapify(entries)
        self._heap = entries
