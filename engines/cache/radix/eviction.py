"""Eviction strategies (docs/radix.md §2.7): the smallest `key(node)` among evictable leaves goes first.

Chosen by name through `EVICTION_POLICIES` (`engine.eviction_policy`). Keys read only node fields,
so the tree re-pushes a leaf into its persistent queue whenever one of those fields changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engines.cache.radix.node import TreeNode
from engines.registry import Registry

EVICTION_POLICIES: Registry[type[EvictionPolicy]] = Registry("eviction policy")


class EvictionPolicy:
    name = "base"
    # True when equal keys imply equal last_access_time (the key is the stamp, or ends with it):
    # the leaf queue then leaves the stamp out of its entries, since it could never break a tie
    stamp_decides_ties = False

    def key(self, node: TreeNode) -> Any:
        raise NotImplementedError


@EVICTION_POLICIES.register("lru")
class LRU(EvictionPolicy):
    name = "lru"
    stamp_decides_ties = True

    def key(self, node: TreeNode) -> Any:
        return node.last_access_time


@EVICTION_POLICIES.register("lfu")
class LFU(EvictionPolicy):
    name = "lfu"
    stamp_decides_ties = True

    def key(self, node: TreeNode) -> Any:
        return (node.hit_count, node.last_access_time)


@EVICTION_POLICIES.register("fifo")
class FIFO(EvictionPolicy):
    name = "fifo"

    def key(self, node: TreeNode) -> Any:
        return node.creation_time


@EVICTION_POLICIES.register("mru")
class MRU(EvictionPolicy):
    name = "mru"
    stamp_decides_ties = True

    def key(self, node: TreeNode) -> Any:
        return -node.last_access_time


@EVICTION_POLICIES.register("filo")
class FILO(EvictionPolicy):
    name = "filo"

    def key(self, node: TreeNode) -> Any:
        return -node.creation_time


@EVICTION_POLICIES.register("priority")
class Priority(EvictionPolicy):
    name = "priority"
    stamp_decides_ties = True

    def key(self, node: TreeNode) -> Any:
        return (node.priority, node.last_access_time)


@EVICTION_POLICIES.register("slru")
@dataclass
class SLRU(EvictionPolicy):
    """Segmented LRU: the probationary segment (hit_count below the threshold) goes first."""

    protected_threshold: int = 2
    name = "slru"
    stamp_decides_ties = True

    def key(self, node: TreeNode) -> Any:
        return (node.hit_count >= self.protected_threshold, node.last_access_time)


@EVICTION_POLICIES.register("tlru")
@dataclass
class TLRU(EvictionPolicy):
    """Tail-optimised LRU: tail-safe leaves first, then LRU. Defaults make it plain LRU.

    A node ending at depth d with edge length len is tail-safe when
    d - len >= max(H + next_prompt_estimate - threshold, 0), H = its branch's high-water depth.
    """

    next_prompt_estimate: int = 0
    threshold: int = 0
    name = "tlru"
    stamp_decides_ties = True

    def key(self, node: TreeNode) -> Any:
        bound = max(node.high_water + self.next_prompt_estimate - self.threshold, 0)
        tail_safe = node.depth - len(node.value) >= bound
        return (-1 if tail_safe else 0, node.last_access_time)


def make_eviction_policy(name: str, **params: Any) -> EvictionPolicy:
    """Build a policy by name; `params` are its `--radix-eviction-policy-config` fields."""
    return EVICTION_POLICIES.get(name)(**params)
