"""One node of the radix tree (docs/radix.md §1.2): an edge of tokens and the KV slots holding them.

`key` holds only this node's segment (with the namespace), `value` the slot ids of that segment
(a plain list: page-aligned with page size P). `depth` (tokens root -> end of this node) and
`high_water` (deepest depth ever inserted below) are the `tlru` bookkeeping of §2.7. `in_leaf_set`
and `heap_serial` belong to the tree's evictable-leaf set and its persistent heap.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from itertools import count

from engines.cache.radix.key import RadixKey

_NODE_IDS = count()


class TreeNode:
    __slots__ = (
        "id",
        "children",
        "parent",
        "key",
        "child_key",
        "value",
        "lock_ref",
        "last_access_time",
        "creation_time",
        "hit_count",
        "priority",
        "depth",
        "high_water",
        "in_leaf_set",
        "heap_serial",
    )

    def __init__(
        self, key: RadixKey, value: list[int], parent: TreeNode | None, child_key: Hashable | None
    ) -> None:
        self.id = next(_NODE_IDS)
        self.children: dict[Hashable, TreeNode] = {}
        self.parent = parent
        self.key = key
        self.child_key = child_key  # this node's key in parent.children
        self.value = value
        self.lock_ref = 0
        self.last_access_time = 0.0
        self.creation_time = 0.0
        self.hit_count = 0
        self.priority = 0
        self.depth = 0
        self.high_water = 0
        self.in_leaf_set = False
        self.heap_serial: int | None = None

    @classmethod
    def make_root(cls) -> TreeNode:
        root = cls(RadixKey([]), [], None, None)
        root.lock_ref = 1  # never unlocked, so the root is never evictable
        root.priority = -sys.maxsize
        return root

    @property
    def evicted(self) -> bool:
        """Only the hierarchical cache leaves valueless nodes behind; here nodes are deleted."""
        return self.value is None

    def __len__(self) -> int:
        return len(self.value)

    def __lt__(self, other: TreeNode) -> bool:
        return self.last_access_time < other.last_access_time

    def __repr__(self) -> str:
        ids = self.key.token_ids
        shown = ids if len(ids) <= 8 else [*ids[:4], "...", *ids[-2:]]
        return f"TreeNode(id={self.id}, key={shown}, lock_ref={self.lock_ref}, t={self.last_access_time})"
