"""One node of the radix tree (docs/radix.md §1.2): an edge of tokens and the KV slots holding them.

`tokens` holds only this node's segment as packed int32 bytes (compared memcmp-style by the tree),
`key_extra` its (extra_key, cache_salt) pair (`key` rebuilds the `RadixKey` for checks and tests),
`value` the segment's slot ids (an int32 array, page-aligned with page size P). `depth` (tokens
root -> end of this node) and `high_water` (deepest depth ever inserted below) are the `tlru`
bookkeeping of §2.7. `in_leaf_set` and `heap_serial` belong to the evictable-leaf set and its queue,
`run` and `run_owner` to the match walk's shortcuts (runs.py).
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from itertools import count
from typing import TYPE_CHECKING

import numpy as np

from engines.cache.radix.key import RadixKey, unpack
from engines.cache.radix.slot_row import SLOT_DTYPE

if TYPE_CHECKING:
    from engines.cache.radix.runs import Run

_NODE_IDS = count()


class TreeNode:
    __slots__ = (
        "id",
        "children",
        "parent",
        "tokens",
        "key_extra",
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
        "run",
        "run_owner",
    )

    def __init__(
        self,
        tokens: bytes,
        key_extra: tuple[str | None, str | None],
        value: np.ndarray,
        parent: TreeNode | None,
        child_key: Hashable | None,
    ) -> None:
        self.id = next(_NODE_IDS)
        self.children: dict[Hashable, TreeNode] = {}
        self.parent = parent
        self.tokens = tokens
        self.key_extra = key_extra  # (extra_key, cache_salt) of the key that created the node
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
        self.run: Run | None = (
            None  # runs.Run: shortcut over the single-child chain below (runs.py)
        )
        self.run_owner: TreeNode | None = None  # the node whose run lists this one

    @classmethod
    def make_root(cls) -> TreeNode:
        root = cls(b"", (None, None), np.empty(0, dtype=SLOT_DTYPE), None, None)
        root.lock_ref = 1  # never unlocked, so the root is never evictable
        root.priority = -sys.maxsize
        return root

    @property
    def key(self) -> RadixKey:
        """This node's segment as a `RadixKey` (a fresh list: checks and tests, not hot paths)."""
        return RadixKey(unpack(self.tokens), *self.key_extra)

    @property
    def evicted(self) -> bool:
        """Only the hierarchical cache leaves valueless nodes behind; here nodes are deleted."""
        return self.value is None

    def __len__(self) -> int:
        return len(self.value)

    def __lt__(self, other: TreeNode) -> bool:
        return self.last_access_time < other.last_access_time

    def __repr__(self) -> str:
        ids = unpack(self.tokens)
        shown = ids if len(ids) <= 8 else [*ids[:4], "...", *ids[-2:]]
        return f"TreeNode(id={self.id}, key={shown}, lock_ref={self.lock_ref}, t={self.last_access_time})"
