"""Waiting-queue ordering of SGLang's `SchedulePolicy` (docs/radix.md §8).

`fcfs` keeps the order; `lpm` stable-sorts by the longest (uncapped) match, and falls back to the
current order above `lpm_fallback_queue_len` waiting requests; `dfs-weight` orders requests by a
post-order walk that visits heavier subtrees first. Cache-aware passes match every waiting request
(splitting and stamping the tree) and deprioritise requests that share a new prefix with an earlier
one (the scratch tree, §8.5). Cache-agnostic passes refresh the queue head's prefixes (§8.8).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from typing import NamedTuple

from engines.cache.radix.clock import LogicalClock
from engines.cache.radix.hooks import max_prefix_len, request_key
from engines.cache.radix.node import TreeNode
from engines.cache.radix.tree import UnifiedRadixTree
from engines.registry import Registry
from engines.sequence import Sequence

REFRESH_EVERY_PASSES = 32
REFRESH_MAX_REQUESTS = 128


class SortPassMatch(NamedTuple):
    prefix_len: int
    last_node: TreeNode


class PolicySpec(NamedTuple):
    cache_aware: bool
    falls_back: bool  # keeps the current order above the fallback queue length (§8.3)
    order: Callable[..., list[Sequence]] | None


def lpm_order(
    waiting: list[Sequence],
    matches: dict[str, SortPassMatch],
    deprioritized: set[str],
    root: TreeNode,
) -> list[Sequence]:
    """Stable sort by -min(uncapped match, cap); deprioritised requests last (§8.2)."""

    def sort_key(seq: Sequence) -> float:
        if seq.seq_id in deprioritized:
            return float("inf")
        return -min(matches[seq.seq_id].prefix_len, max_prefix_len(seq))

    return sorted(waiting, key=sort_key)


def dfs_weight_order(
    waiting: list[Sequence],
    matches: dict[str, SortPassMatch],
    deprioritized: set[str],
    root: TreeNode,
) -> list[Sequence]:
    """Post-order walk, children by descending waiting-request weight (stable over dict order),
    each node's requests after its subtree in queue order; unmatched requests last (§8.4).

    Zero-weight subtrees hold no request, so the walk skips them (same output, no O(tree) pass).
    """
    reqs_at: dict[TreeNode, list[Sequence]] = defaultdict(list)
    for seq in waiting:
        reqs_at[matches[seq.seq_id].last_node].append(seq)
    weight: dict[TreeNode, int] = defaultdict(int)
    for node, reqs in reqs_at.items():
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


SCHEDULE_POLICIES: Registry[PolicySpec] = Registry("schedule policy")
SCHEDULE_POLICIES.add("fcfs", PolicySpec(cache_aware=False, falls_back=False, order=None))
SCHEDULE_POLICIES.add("lpm", PolicySpec(cache_aware=True, falls_back=True, order=lpm_order))
SCHEDULE_POLICIES.add(
    "dfs-weight", PolicySpec(cache_aware=True, falls_back=False, order=dfs_weight_order)
)


class SchedulePolicy:
    def __init__(
        self,
        name: str,
        tree: UnifiedRadixTree,
        eviction_policy: str = "lru",
        lpm_fallback_queue_len: int = 128,
        in_batch_check_threshold: int = 32,
        in_batch_deprioritize_threshold: int = 32,
        waiting_prefix_refresh: bool = True,
    ) -> None:
        self.name = name
        self.spec = SCHEDULE_POLICIES.get(name)
        self.tree = tree
        self.eviction_policy = eviction_policy
        self.lpm_fallback_queue_len = lpm_fallback_queue_len
        self.check_threshold = in_batch_check_threshold
        self.deprioritize_threshold = in_batch_deprioritize_threshold
        self.waiting_prefix_refresh = waiting_prefix_refresh
        # Upstream uses a simulated page-1 RadixCache; only match lengths are read from it.
        self.scratch = UnifiedRadixTree(page_size=1, allocator=None, clock=LogicalClock())
        self.num_refresh_passes = 0
        self.last_matches: dict[str, SortPassMatch] = {}
        self.last_deprioritized: set[str] = set()

    def active_is_cache_aware(self, num_waiting: int) -> bool:
        """_determine_active_policy / _validate_and_adjust_policy (§2.9, §8.3)."""
        if not self.spec.cache_aware or self.tree.disable:
            return False
        return not (self.spec.falls_back and num_waiting > self.lpm_fallback_queue_len)

    def calc_priority(self, waiting: deque[Sequence]) -> None:
        """Reorder `waiting` in place for this prefill round."""
        if self.active_is_cache_aware(len(waiting)):
            queue = list(waiting)
            self.last_matches, self.last_deprioritized = self.compute_prefix_matches(queue)
            ordered = self.spec.order(
                queue, self.last_matches, self.last_deprioritized, self.tree.root_node
            )
            waiting.clear()
            waiting.extend(ordered)
            return
        if (
            waiting
            and self.eviction_policy == "lru"
            and not self.tree.disable
            and self.waiting_prefix_refresh
        ):
            self.num_refresh_passes += 1
            if (self.num_refresh_passes - 1) % REFRESH_EVERY_PASSES == 0:
                self.touch_waiting_prefixes(waiting)

    def compute_prefix_matches(
        self, queue: list[Sequence]
    ) -> tuple[dict[str, SortPassMatch], set[str]]:
        """Uncapped match of every waiting request in queue order, plus in-batch
        deprioritisation against the scratch tree (§8.2, §8.5)."""
        matches: dict[str, SortPassMatch] = {}
        deprioritized: set[str] = set()
        self.scratch.reset()
        for seq in queue:
            key = request_key(seq)
            result = self.tree.match_prefix(key)
            matches[seq.seq_id] = SortPassMatch(result.device_prefix_len, result.last_device_node)
            if result.device_prefix_len <= self.check_threshold:
                in_batch = self.scratch.match_prefix(key).device_prefix_len
                if in_batch >= self.deprioritize_threshold:
                    deprioritized.add(seq.seq_id)
                else:
                    self.scratch.insert(key)
        return matches, deprioritized

    def touch_waiting_prefixes(self, waiting: deque[Sequence]) -> None:
        """Re-touch the first 128 waiting requests' prefixes, back to front (§8.8)."""
        head = [waiting[i] for i in range(min(len(waiting), REFRESH_MAX_REQUESTS))]
        for seq in reversed(head):
            self.tree.touch_prefix(request_key(seq))
