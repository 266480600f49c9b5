"""Waiting-queue policies shared by both scheduler designs: `fcfs`, `lpm`, `dfs-weight`.

Each is written once over the cache protocol: a pass matches every waiting request uncapped
(`PrefixCache.match(seq, capped=False)`; on radix this splits and stamps the tree, as upstream's
policy pass does) and reorders the queue. `lpm` stable-sorts by the longest match (at most the
last-token cap), requests the scheduler deprioritised last; `dfs-weight` asks the cache for its
structure's heaviest-subtree-first walk (`PrefixOrder.dfs_weight_order`: the radix tree, or the
tree that APC's chained block hashes imply). Cache-aware policies fall back to the current order
on a disabled cache, and `lpm` above `lpm_fallback_queue_len` waiting requests (SGLang 0.5.23
`SchedulePolicy._determine_active_policy`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from engines.cache.protocol import AnyPrefixCache, PrefixOrder
from engines.cache.records import PrefixMatch
from engines.errors import BadInput
from engines.registry import Registry
from engines.sequence import Sequence

Matches = dict[str, PrefixMatch[Any]]
Order = Callable[[list[Sequence], Matches, set[str], AnyPrefixCache], list[Sequence]]


class PolicySpec(NamedTuple):
    cache_aware: bool
    falls_back: bool  # keeps the current order above the fallback queue length
    order: Order | None


def _cap(seq: Sequence) -> int:
    """The last-token rule: at most num_tokens - 1 reusable (0 when the prompt may not be read)."""
    return 0 if seq.skip_cache_read else max(seq.num_tokens - 1, 0)


def lpm_order(
    queue: list[Sequence], matches: Matches, deprioritized: set[str], cache: AnyPrefixCache
) -> list[Sequence]:
    def sort_key(seq: Sequence) -> float:
        if seq.seq_id in deprioritized:
            return float("inf")
        return -min(matches[seq.seq_id].num_tokens, _cap(seq))

    return sorted(queue, key=sort_key)


def dfs_weight(
    queue: list[Sequence], matches: Matches, deprioritized: set[str], cache: AnyPrefixCache
) -> list[Sequence]:
    if not isinstance(cache, PrefixOrder):
        raise BadInput(
            f"policy 'dfs-weight' needs a cache with a prefix order; {cache.name!r} has none"
        )
    return cache.dfs_weight_order(queue, matches)


POLICIES: Registry[PolicySpec] = Registry("policy")
POLICIES.add("fcfs", PolicySpec(cache_aware=False, falls_back=False, order=None))
POLICIES.add("lpm", PolicySpec(cache_aware=True, falls_back=True, order=lpm_order))
POLICIES.add("dfs-weight", PolicySpec(cache_aware=True, falls_back=False, order=dfs_weight))


def is_active(spec: PolicySpec, cache: AnyPrefixCache, num_waiting: int, fallback_len: int) -> bool:
    """Whether a cache-aware pass runs this round (else the queue keeps its order)."""
    if not spec.cache_aware or not cache.enabled:
        return False
    return not (spec.falls_back and num_waiting > fallback_len)


def uncapped_matches(cache: AnyPrefixCache, queue: list[Sequence]) -> Matches:
    return {seq.seq_id: cache.match(seq, capped=False) for seq in queue}
