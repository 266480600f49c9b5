"""Shortcuts over chains of single-child nodes for the match walk (docs/radix.md §2.1).

The run of a node lists the nodes below it while each has exactly one child, with their edges
joined into one packed bytes object: when the key continues with all of them, one `startswith`
replaces a dict lookup and an edge comparison per node, and the walk still visits exactly the nodes
it would have visited edge by edge (each gets its stamp). A run stays correct while its members keep
their edges and parents, so a split or a deletion of a member clears its owner's run (`run_owner`);
a member gaining a child does not (matching all of the run's tokens still follows its path).
"""

from __future__ import annotations

from typing import NamedTuple

from engines.cache.radix.node import TreeNode

MIN_RUN_NODES = 2  # a shorter chain saves nothing over the edge-by-edge step


class Run(NamedTuple):
    tokens: bytes  # the members' edges, packed and joined in path order
    nodes: tuple[TreeNode, ...]  # the members, top down; nodes[-1].depth ends the run


def build_run(owner: TreeNode) -> Run | None:
    """Collect the single-child chain below `owner` into its run (None when too short).

    A member keeps one owner: joining this run clears the run it belonged to before."""
    nodes = []
    node = owner
    while len(node.children) == 1:
        (node,) = node.children.values()
        nodes.append(node)
    if len(nodes) < MIN_RUN_NODES:
        return None
    for member in nodes:
        previous = member.run_owner
        if previous is not None and previous is not owner:
            previous.run = None
        member.run_owner = owner
    owner.run = Run(b"".join([member.tokens for member in nodes]), tuple(nodes))
    return owner.run


def drop_run_of(member: TreeNode) -> None:
    """`member` is about to be split or deleted: the run that lists it is no longer correct."""
    owner = member.run_owner
    if owner is not None:
        owner.run = None
        member.run_owner = None
