"""SGLang's `dfs-weight` waiting order (docs/radix.md §8.4) over APC's implicit tree.

Chained hashes make APC's cache a tree without storing one: a block key's parent is the key of the
block before it. The hit chains of the waiting requests therefore form a trie:

    root ── k0 ── k1 ── k2   (requests whose last hit block is k2 sit at k2)
             └─── k1' (...)

A node's weight is the number of waiting requests at or below it. The order visits children by
descending weight (stable over first appearance), post-order: a node's requests come after its
children's, and requests with no hit (at the root) come last. Iterative, since a 12k-token prompt
is a 750-block chain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from engines.sequence import Sequence


@dataclass(eq=False)
class _Node:
    children: dict[bytes, _Node] = field(default_factory=dict)
    requests: list[Sequence] = field(default_factory=list)
    weight: int = 0


def dfs_weight_order(
    waiting: Iterable[Sequence], hit_keys: Callable[[Sequence], list[bytes]]
) -> list[Sequence]:
    """`hit_keys(seq)` -> the map keys of seq's leading cached blocks (uncapped)."""
    root = _Node()
    for seq in waiting:
        node = root
        for key in hit_keys(seq):
            node = node.children.setdefault(key, _Node())
        node.requests.append(seq)
    _weigh(root)
    out: list[Sequence] = []
    stack: list[tuple[_Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            out.extend(node.requests)
            continue
        stack.append((node, True))
        kids = sorted(node.children.values(), key=lambda n: -n.weight)
        stack.extend((kid, False) for kid in reversed(kids))
    return out


def _weigh(root: _Node) -> None:
    preorder, stack = [], [root]
    while stack:
        node = stack.pop()
        preorder.append(node)
        stack.extend(node.children.values())
    for node in reversed(preorder):
        node.weight = len(node.requests) + sum(kid.weight for kid in node.children.values())
