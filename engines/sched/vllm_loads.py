"""`HostLoads`: vLLM 0.33's scheduler with an asynchronous KV load (the OffloadingConnector's), on a
cache that declares `AsyncHostLoad` (`vllm/v1/core/sched/scheduler.py`; docs/tiers.md §2.4).

A fresh request with a host hit is admitted holding its blocks (the device hit adopted, uncached
blocks for the load, the blocks other prefills in flight still need kept free) and computes
nothing: it waits in WAITING_FOR_REMOTE_KVS until its load is done. Requests holding KV are tried
before the rest of the queue; a done load's blocks are cached, a whole-request hit computes its
last token again, and the request is scheduled from its loaded length. Skipped requests keep
their places. vLLM's engine core processes a step's output after it scheduled the next step, so a
request that finished is released only after that next plan, and a running request's blocks
that its sampled token completed are cached then (docs/tiers.md §2.4).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from engines.cache.protocol import AnyAllocation, AnyPrefixCache
from engines.cache.records import Allocation
from engines.cache.tiers import AsyncHostLoad, HostTier
from engines.sched.base import StepBudget, StepPlan
from engines.sequence import SeqStatus, Sequence

if TYPE_CHECKING:
    from engines.sched.vllm import VllmScheduler

# What admitting a fresh request gave besides its scheduled tokens (None: it did not fit)
SKIPPED = -1  # a chunk it would hit is being written or loaded: it keeps its place
LOADING = 0  # its host hit is being loaded: it holds its blocks and waits


class HostLoads:
    """The waiting loop and the release timing of a vLLM scheduler whose tier loads between steps."""

    def __init__(self, cache: AnyPrefixCache) -> None:
        assert isinstance(cache, AsyncHostLoad) and isinstance(cache, HostTier)
        self.loads: AsyncHostLoad = cache
        self.tier: HostTier = cache
        self.finished: list[Sequence] = []  # finished in the last step, not yet released
        self.last_scheduled: set[str] = set()  # the last plan's requests
        self.sampling: list[Sequence] = []  # the last plan's requests whose step samples a token
        self.running_order: list[str] = []  # the running list after the last plan
        # vLLM's _inflight_prefills: admitted requests whose prefill is not fully scheduled
        self.in_flight: dict[str, Sequence] = {}
        # The last plan released a finished request or had a load in flight (started or done)
        self.advanced = False

    def after_plan(self, sched: VllmScheduler, plan: StepPlan, running: list[Sequence]) -> None:
        """The plan is made: prefills fully scheduled leave the in-flight set, then the last
        step's output is processed: finished requests released, the transfers it ran done (an
        empty step runs the connector too)."""
        for item in plan.scheduled:
            if item.end >= item.seq.num_tokens:
                self.in_flight.pop(item.seq.seq_id, None)
        for seq in plan.preempted:
            self.in_flight.pop(seq.seq_id, None)
        self.last_scheduled = {item.seq.seq_id for item in plan.scheduled}
        self.running_order = [seq.seq_id for seq in running]
        # Read before this step's releases and completions: the step that completes a load
        # leaves nothing pending, yet its request is scheduled at the very next step.
        self.advanced = self.pending()
        self.cache_sampled(sched)
        self.sampling = [it.seq for it in plan.scheduled if it.end >= it.seq.num_tokens]
        self.release_finished(sched)
        self.tier.host_after_step([])

    def cache_sampled(self, sched: VllmScheduler) -> None:
        """The last step's sampled tokens are processed: vLLM's AsyncScheduler caches each
        still-running request's blocks up to its computed tokens less those in flight
        (`_update_request_with_output`, v1/core/sched/async_scheduler.py), which are the tokens
        that step computed. A request the next plan did not schedule (the running loop stopped
        at a busy victim, or the budget ran out) would otherwise leave the block its last token
        completed uncached until its next allocation, and lose it to a preemption first."""
        if not (sched.async_scheduling and sched.cache.matchable_at_allocation):
            return
        for seq in self.sampling:
            if seq.status is SeqStatus.RUNNING:
                sched.cache.commit(seq, seq.num_computed_tokens)

    def pending(self) -> bool:
        """Something a step with nothing scheduled still advances: a release or a load."""
        return (
            bool(self.finished)
            or any(not self.loads.host_load_done(seq) for seq in self.in_flight.values())
            or self.loads.host_busy()
        )

    def victim_busy(self, running: list[Sequence]) -> bool:
        """Whether vLLM's preemption victim, the last of its running list, ran in the step in
        flight: with async scheduling and a connector that loads KV, its blocks would be freed
        only once that step's output is processed (`Scheduler.defer_block_free`), so vLLM stops
        scheduling running requests instead. Its running list still holds the requests that
        finished in that step, at their places."""
        finished = {seq.seq_id for seq in self.finished}
        current = {seq.seq_id for seq in running}
        for rid in reversed(self.running_order):
            if rid in finished:
                return True
            if rid in current:
                break
        return bool(running) and running[-1].seq_id in self.last_scheduled

    def release_finished(self, sched: VllmScheduler) -> None:
        """The last step's output is processed: its finished requests are released."""
        finished, self.finished = self.finished, []
        for seq in finished:
            sched.release_finished(seq)

    def schedule_waiting(
        self,
        sched: VllmScheduler,
        plan: StepPlan,
        waiting: deque[Sequence],
        running: list[Sequence],
        budget: StepBudget,
        token_budget: int,
    ) -> None:
        """vLLM's waiting loop with `kv_holding_waiting` (requests holding KV: loads) drained
        before the queue; both keep the order of what they skipped."""
        holding = deque(s for s in waiting if s.num_computed_tokens > 0)
        queue = deque(s for s in waiting if s.num_computed_tokens == 0)
        skipped_holding: list[Sequence] = []
        skipped: list[Sequence] = []
        while token_budget > 0 and len(running) < budget.max_num_seqs:
            source = holding if holding else queue
            if not source:
                break
            seq = source[0]
            if source is holding:
                if not self.loads.host_load_done(seq):
                    skipped_holding.append(holding.popleft())
                    continue
                self._loaded(sched, seq)
                num_new = self._schedule_holding(sched, plan, seq, running, token_budget)
            else:
                num_new = self._admit(sched, plan, seq, running, token_budget)
                if num_new == SKIPPED:
                    skipped.append(queue.popleft())
                    continue
                if num_new == LOADING:
                    skipped_holding.append(queue.popleft())
                    continue
            if num_new is None:
                break  # head-of-line blocking: nothing behind it is tried this step
            source.popleft()
            token_budget -= num_new
        waiting.clear()
        waiting.extend([*skipped_holding, *holding, *skipped, *queue])

    def _loaded(self, sched: VllmScheduler, seq: Sequence) -> None:
        """`_update_waiting_for_remote_kv`: cache the loaded blocks, then the last-token rule."""
        sched.cache.commit(seq, seq.num_computed_tokens)
        if seq.num_computed_tokens == seq.num_tokens:
            seq.num_computed_tokens -= 1

    def _schedule_holding(
        self,
        sched: VllmScheduler,
        plan: StepPlan,
        seq: Sequence,
        running: list[Sequence],
        token_budget: int,
    ) -> int | None:
        """A request holding KV is scheduled from its computed length; None when it does not fit."""
        start = seq.num_computed_tokens
        num_new = min(seq.num_tokens - start, token_budget)
        item: AnyAllocation = Allocation(
            seq, num_new, whole_sequence_must_fit=sched.reserve_full_prompt
        )
        if not sched.cache.allocate([item]):
            return None
        self._run(sched, plan, seq, running, start, num_new)
        return num_new

    def _admit(
        self,
        sched: VllmScheduler,
        plan: StepPlan,
        seq: Sequence,
        running: list[Sequence],
        token_budget: int,
    ) -> int | None:
        """A fresh (or preempted) request: its scheduled tokens, LOADING, SKIPPED, or None when
        it does not fit."""
        cache = sched.cache
        match = cache.match(seq)
        num_hit = match.num_tokens
        host = self.tier.host_lookup(seq, num_hit)
        if host is None:
            return SKIPPED
        if sched.stats_at_lookup:
            sched._record(seq, num_hit)
        if host:
            fits = self.loads.host_admit(
                seq, match, num_hit, host, sched.reserve_full_prompt, list(self.in_flight.values())
            )
            if not fits:
                return None
            self._admitted(sched, seq, num_hit, host)
            self.in_flight[seq.seq_id] = seq
            return LOADING
        num_new = min(seq.num_tokens - num_hit, token_budget)
        item: AnyAllocation = Allocation(
            seq, num_new, adopt=match, whole_sequence_must_fit=sched.reserve_full_prompt
        )
        if not cache.allocate([item]):
            return None
        self._admitted(sched, seq, num_hit, 0)
        self.tier.host_load(seq, num_hit, 0)
        self._run(sched, plan, seq, running, num_hit, num_new)
        return num_new

    def _admitted(self, sched: VllmScheduler, seq: Sequence, num_hit: int, host: int) -> None:
        """Bookkeeping at admission: computed and cached tokens, vLLM's prefix-cache stats."""
        num_computed = num_hit + host
        if seq.status is SeqStatus.PREEMPTED:
            before = sched._computed_at_preemption.pop(seq.seq_id, 0)
            seq.num_recomputed_tokens += max(before - num_computed, 0)
        seq.num_computed_tokens = num_computed
        if seq.num_cached_tokens is None:
            seq.num_cached_tokens = num_computed
            storage = self.loads.host_storage_tokens(seq) if host else 0
            seq.num_host_cached_tokens = host - storage
            seq.num_storage_cached_tokens = storage
        if not sched.stats_at_lookup:
            sched._record(seq, num_hit)

    def _run(
        self,
        sched: VllmScheduler,
        plan: StepPlan,
        seq: Sequence,
        running: list[Sequence],
        start: int,
        num_new: int,
    ) -> None:
        running.append(seq)
        seq.status = SeqStatus.RUNNING
        if start + num_new < seq.num_tokens:
            self.in_flight[seq.seq_id] = seq
        sched._add(plan, seq, start, num_new)
