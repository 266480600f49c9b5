"""SGLang 0.5.23's waiting-queue pass (`SchedulePolicy.calc_priority`) over any cache.

A cache-aware round matches every waiting request uncapped, deprioritises requests that share a
new prefix with an earlier one (a scratch page-1 radix tree of the queue's own prompts, as upstream
simulates one; only match lengths are read from it) and reorders with the shared policy
(engines/sched/policies.py). A cache-agnostic round re-touches the first 128 waiting requests'
prefixes every 32 passes, back to front (`RecencyRefresh.touch`; only LRU reads the stamps).
"""

from __future__ import annotations

from collections import deque

from engines.cache.protocol import AnyPrefixCache, RecencyRefresh
from engines.cache.radix.hooks import request_key
from engines.cache.radix.recency import LogicalClock
from engines.cache.radix.tree import UnifiedRadixTree
from engines.sched.policies import POLICIES, Matches, is_active, uncapped_matches
from engines.sequence import Sequence

REFRESH_EVERY_PASSES = 32
REFRESH_MAX_REQUESTS = 128


class SglangPolicy:
    def __init__(
        self,
        name: str,
        cache: AnyPrefixCache,
        lpm_fallback_queue_len: int = 128,
        in_batch_check_threshold: int = 32,
        in_batch_deprioritize_threshold: int = 32,
        waiting_prefix_refresh: bool = True,
    ) -> None:
        self.name = name
        self.spec = POLICIES.get(name)
        self.cache = cache
        # the periodic waiting-prefix refresh needs RecencyRefresh (radix); APC has no recency
        self.refresh = cache if isinstance(cache, RecencyRefresh) else None
        self.lpm_fallback_queue_len = lpm_fallback_queue_len
        self.check_threshold = in_batch_check_threshold
        self.deprioritize_threshold = in_batch_deprioritize_threshold
        self.waiting_prefix_refresh = waiting_prefix_refresh
        self.scratch = UnifiedRadixTree(page_size=1, allocator=None, clock=LogicalClock())
        self.num_refresh_passes = 0
        self.last_matches: Matches = {}
        self.last_deprioritized: set[str] = set()

    def calc_priority(self, waiting: deque[Sequence]) -> None:
        """Reorder `waiting` in place for this prefill round."""
        order = self.spec.order  # None for fcfs, which is never active
        if order is not None and is_active(
            self.spec, self.cache, len(waiting), self.lpm_fallback_queue_len
        ):
            queue = list(waiting)
            self.last_matches, self.last_deprioritized = self.compute_prefix_matches(queue)
            ordered = order(queue, self.last_matches, self.last_deprioritized, self.cache)
            waiting.clear()
            waiting.extend(ordered)
            return
        if waiting and self.cache.enabled and self.waiting_prefix_refresh:
            self.num_refresh_passes += 1
            refresh = self.refresh
            if (self.num_refresh_passes - 1) % REFRESH_EVERY_PASSES == 0 and refresh is not None:
                head = [waiting[i] for i in range(min(len(waiting), REFRESH_MAX_REQUESTS))]
                for seq in reversed(head):
                    refresh.touch(seq)

    def compute_prefix_matches(self, queue: list[Sequence]) -> tuple[Matches, set[str]]:
        """Uncapped match of every waiting request in queue order, plus in-batch
        deprioritisation against the scratch tree."""
        matches: Matches = {}
        deprioritized: set[str] = set()
        self.scratch.reset()
        for seq in queue:
            match = matches[seq.seq_id] = uncapped_matches(self.cache, [seq])[seq.seq_id]
            if match.num_tokens <= self.check_threshold:
                key = request_key(seq)
                in_batch = self.scratch.match_prefix(key).device_prefix_len
                if in_batch >= self.deprioritize_threshold:
                    deprioritized.add(seq.seq_id)
                else:
                    self.scratch.insert(key)
        return matches, deprioritized
