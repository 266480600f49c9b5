"""SGLang's `dfs-weight` walk over the radix tree (SGLang 0.5.23 `SchedulePolicy._sort_by_dfs_weight`).

The policy itself (when it runs, what it matches) is shared by both schedulers in
engines/sched/policies.py; this is the tree-shaped half that only the radix cache can answer.
"""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple

from engines.cache.radix.node import TreeNode
from engines.sequence import Sequence


class SortPassMatch(NamedTuple):
    prefix_len: int
    last_node: TreeNode


def dfs_weight_order(
    waiting: list[Sequence],
    matches: dict[str, SortPassMatch],
    deprioritized: set[str],
    root: TreeNode,
) -> list[Sequence]:
    """Post-order walk, children by descending waiting-request weight (stable over dict order),
    each node's requests after its subtree in queue order; unmatched requests last.

    Zero-weight subtrees hold no request, so the walk skips them (same output, no O(tree) pass).
    """
    reqs_at: dict[TreeNode, list[Sequence]] = defaultdict(list)
    for seq in waiting:
        reqs_at[matches[seq.seq_id].last_node].append(seq)
    weight: dict[TreeNode, int] = defaultdict(int)
    for last, reqs in reqs_at.items():
        node: TreeNode | None = last
        while node is not None:
            weight[node] += len(reqs)
            node = node.parent
    out: list[Sequence] = []
    stack: list[tuple[TreeNode, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            out.extend(reqs_at.get(node, ()))
            continue
        stack.append((node, True))
        kids = [child for child in node.children.values() if weight.get(child)]
        kids.sort(key=lambda child: -weight[child])
        stack.extend((child, False) for child in reversed(kids))
    return out
