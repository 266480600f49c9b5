"""`VllmScheduler`: vLLM 0.33's scheduling step (`vllm/v1/core/sched/scheduler.py`) over any cache.

One step: (1) running requests first, each allocating its next tokens and preempting the last
running request on failure (to the FRONT of waiting); (2) only if nothing was preempted, waiting
requests in queue order with head-of-line blocking, under one token budget (chunked prefill, so
prefill and decode mix) and `max_num_seqs`. Async scheduling (the 0.33 default) makes a block
completed by a generated token matchable one step later, because upstream schedules that token as
a placeholder before it is known.

On a cache that is matchable at allocation (APC) that is all; on one that is not (radix), every
step's computed tokens are committed after the step, the earliest point they can be matched.

A cache with a `HostTier` (vLLM's OffloadingConnector, engines/cache/apc/tiered.py) is asked past
the device hit at admission; a request whose chunks are still being written or loaded waits
(skipped, its place kept). With `AsyncHostLoad` a host hit is admitted holding its blocks but
computes nothing until its load is done (engines/sched/vllm_loads.py); a hit that covers the whole
request computes its last token again. Its stores follow every planned step, so such a run plans
every step (no decode runs), and a finished request is released after the next step is planned,
as vLLM's engine core processes a step's output only after it scheduled the next one.
"""

from __future__ import annotations

from collections import deque

from engines.cache.protocol import AnyAllocation, AnyPrefixCache, DecodeRunAllocation
from engines.cache.records import Allocation
from engines.cache.tiers import AsyncHostLoad, HostTier
from engines.sched.base import DecodeRun, ScheduledSeq, Scheduler, StepBudget, StepPlan
from engines.sched.decode_run import fitting_steps, steps_before_finish
from engines.sched.policies import POLICIES, is_active, uncapped_matches
from engines.sched.vllm_loads import HostLoads
from engines.sequence import SeqStatus, Sequence


class VllmScheduler(Scheduler):
    overlap = False  # vLLM's async scheduling is modelled by its caching cap, not by arrivals

    def __init__(
        self,
        cache: AnyPrefixCache,
        *,
        policy: str = "fcfs",
        reserve_full_prompt: bool = True,
        async_scheduling: bool = True,
        stats_at_lookup: bool = False,
        lpm_fallback_queue_len: int = 128,
    ) -> None:
        self.cache = cache
        # decode runs need the cache's DecodeRunAllocation; without it every step is planned
        self.runs = cache if isinstance(cache, DecodeRunAllocation) else None
        self.tier = cache if isinstance(cache, HostTier) else None
        self.loads = HostLoads(cache) if isinstance(cache, AsyncHostLoad) else None
        self.policy = POLICIES.get(policy)
        self.reserve_full_prompt = reserve_full_prompt
        self.async_scheduling = async_scheduling
        self.stats_at_lookup = stats_at_lookup
        self.lpm_fallback_queue_len = lpm_fallback_queue_len
        # async: seq_id -> num_tokens known when its last step was planned (before the sample)
        self._known_tokens: dict[str, int] = {}
        # host tier only: seq_id -> tokens known when this step was planned (async: the last
        # sampled token is not; the connector offers no chunk it would complete)
        self._step_limits: dict[str, int] = {}
        # seq_id -> num_computed_tokens when preempted (for num_recomputed_tokens)
        self._computed_at_preemption: dict[str, int] = {}

    def schedule(
        self,
        waiting: deque[Sequence],
        running: list[Sequence],
        budget: StepBudget,
        *,
        now_s: float | None = None,  # vLLM decides nothing against the clock
    ) -> StepPlan:
        plan = StepPlan()
        self._step_limits.clear()
        self._order(waiting)
        token_budget = self._schedule_running(plan, waiting, running, budget.max_num_batched_tokens)
        if not plan.preempted:
            if self.loads is not None:
                self.loads.schedule_waiting(self, plan, waiting, running, budget, token_budget)
            else:
                self._schedule_waiting(plan, waiting, running, budget, token_budget)
        if self.tier is not None:  # the connector builds its store jobs from the step's plan,
            limits = self._step_limits  # capped at the tokens known (async: not the last sample)
            self.tier.host_after_schedule(
                [(it.seq, min(it.end, limits.get(it.seq.seq_id, it.end))) for it in plan.scheduled]
            )
        if self.loads is not None:
            self.loads.after_plan(self, plan, running)
        return plan

    def _order(self, waiting: deque[Sequence]) -> None:
        order = self.policy.order  # None for fcfs, which is never active
        if (
            order is None
            or len(waiting) <= 1
            or not is_active(self.policy, self.cache, len(waiting), self.lpm_fallback_queue_len)
        ):
            return
        queue = list(waiting)
        ranked = order(queue, uncapped_matches(self.cache, queue), set(), self.cache)
        waiting.clear()
        waiting.extend(ranked)

    def _schedule_running(
        self, plan: StepPlan, waiting: deque[Sequence], running: list[Sequence], token_budget: int
    ) -> int:
        i = 0
        while i < len(running) and token_budget > 0:
            seq = running[i]
            num_new = min(seq.num_tokens - seq.num_computed_tokens, token_budget)
            if num_new <= 0:
                i += 1
                continue
            item: AnyAllocation = Allocation(
                seq, num_new, matchable_limit=self._known_tokens.pop(seq.seq_id, None)
            )
            if self.tier is not None and item.matchable_limit is not None:
                self._step_limits[seq.seq_id] = item.matchable_limit
            while not (ok := self.cache.allocate([item])):
                if self.loads is not None and self.loads.victim_busy(running):
                    break  # its blocks are freed only after the step in flight: no help now
                victim = running.pop()  # FCFS: the lowest priority is the last running request
                self._preempt(victim, waiting)
                plan.preempted.append(victim)
                if victim is seq:
                    break
            if not ok:
                break
            self._add(plan, seq, seq.num_computed_tokens, num_new)
            token_budget -= num_new
            i += 1
        return token_budget

    def _schedule_waiting(
        self,
        plan: StepPlan,
        waiting: deque[Sequence],
        running: list[Sequence],
        budget: StepBudget,
        token_budget: int,
    ) -> None:
        cache = self.cache
        skipped: list[Sequence] = []  # waiting on a host chunk still being written
        while waiting and token_budget > 0 and len(running) < budget.max_num_seqs:
            seq = waiting[0]
            fresh = seq.num_computed_tokens == 0
            match = cache.match(seq) if fresh else None
            num_hit = match.num_tokens if match is not None else 0
            num_host = 0
            if fresh and self.tier is not None:
                host = self.tier.host_lookup(seq, num_hit)
                if host is None:  # vLLM skips it this step and keeps its place
                    skipped.append(waiting.popleft())
                    continue
                num_host = host
            if fresh and self.stats_at_lookup:
                self._record(seq, num_hit)
            num_computed = seq.num_computed_tokens + num_hit + num_host
            if num_host and num_computed == seq.num_tokens:
                num_computed -= 1  # a whole-request hit computes the last token again
            num_new = min(seq.num_tokens - num_computed, token_budget)
            item: AnyAllocation = Allocation(
                seq,
                num_computed - seq.num_computed_tokens - num_hit + num_new,
                adopt=match,
                whole_sequence_must_fit=self.reserve_full_prompt,
            )
            if not cache.allocate([item]):
                break  # head-of-line blocking: nothing behind it is tried this step
            waiting.popleft()
            running.append(seq)
            if seq.status is SeqStatus.PREEMPTED:
                before = self._computed_at_preemption.pop(seq.seq_id, 0)
                seq.num_recomputed_tokens += max(before - num_computed, 0)
            seq.status = SeqStatus.RUNNING
            seq.num_computed_tokens = num_computed
            if seq.num_cached_tokens is None:
                seq.num_cached_tokens = num_hit + num_host
                seq.num_host_cached_tokens = num_host
            if fresh and self.tier is not None:
                self.tier.host_load(seq, num_hit, num_host)
            if fresh and not self.stats_at_lookup:
                self._record(seq, num_hit)
            self._add(plan, seq, num_computed, num_new)
            token_budget -= num_new
        waiting.extendleft(reversed(skipped))

    def _record(self, seq: Sequence, num_hit: int) -> None:
        """vLLM's PrefixCacheStats: whole prompt as the query; preempted requests apart."""
        if not seq.skip_cache_read:
            self.cache.record_admission(
                num_hit, seq.num_tokens - num_hit, new_request=True, retried=seq.num_preemptions > 0
            )

    def _add(self, plan: StepPlan, seq: Sequence, start: int, num_new: int) -> None:
        plan.scheduled.append(ScheduledSeq(seq, start, num_new))
        if self.async_scheduling and start + num_new == seq.num_tokens:
            # This step samples a token; upstream schedules it next step as a placeholder that
            # request.num_tokens (the caching cap) does not include yet.
            self._known_tokens[seq.seq_id] = seq.num_tokens

    def _preempt(self, seq: Sequence, waiting: deque[Sequence]) -> None:
        self._computed_at_preemption[seq.seq_id] = seq.num_computed_tokens
        self.cache.release(seq, finished=False)
        self._known_tokens.pop(seq.seq_id, None)
        seq.status = SeqStatus.PREEMPTED
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        waiting.appendleft(seq)

    def plan_decode_run(
        self, waiting: deque[Sequence], running: list[Sequence], budget: StepBudget
    ) -> DecodeRun | None:
        """With nobody waiting and every running request one token behind (decoding), each step
        schedules one token of every running request in order, as long as allocation never fails
        (no preemption). A cache that is not matchable at allocation is committed every step
        (`finish_step`), so it takes per-step scheduling."""
        if self.runs is None or waiting or not running or not self.cache.matchable_at_allocation:
            return None
        if self.tier is not None:  # the tier plans its stores every step
            return None
        if len(running) > budget.max_num_batched_tokens:
            return None
        if any(seq.num_tokens - seq.num_computed_tokens != 1 for seq in running):
            return None
        available = self.runs.available_tokens()
        num_steps = fitting_steps(
            self.runs, available, running, steps_before_finish(running), headroom=0
        )
        return DecodeRun(list(running), num_steps) if num_steps > 0 else None

    def apply_decode_run(self, run: DecodeRun, num_steps: int) -> None:
        """Each step of the run allocates one token per request under the known-token cap; under
        async scheduling step s >= 1 caps at the tokens known when step s - 1 was planned."""
        items: list[AnyAllocation] = [
            Allocation(seq, 1, matchable_limit=self._known_tokens.pop(seq.seq_id, None))
            for seq in run.seqs
        ]
        if self.runs is None:
            raise TypeError(f"cache {self.cache.name!r} has no decode runs to apply")
        self.runs.allocate_decode_run(items, num_steps, matchable_lag=int(self.async_scheduling))
        if self.async_scheduling:  # the run's last step samples a token, as _add records
            for seq in run.seqs:
                self._known_tokens[seq.seq_id] = seq.num_computed_tokens + num_steps

    def transfers_pending(self) -> bool:
        """The last step, scheduling nothing, still advanced a host load or a finished request's
        release (`PendingTransfers`): the next step may schedule what it unblocked."""
        return self.loads is not None and self.loads.advanced

    def transfers_due_s(self) -> float | None:
        """A host load completes at the iteration after its plan: no time is owed."""
        return None

    def on_idle(self) -> None:
        """Nothing but a host tier's transfers in flight completing: vLLM's scheduler keeps no
        state that an idle iteration resets."""
        if self.loads is not None:
            self.loads.release_finished(self)
        if self.tier is not None:
            self.tier.host_idle()

    def finish_step(self, plan: StepPlan, finished: list[Sequence]) -> None:
        """Commit what the step computed where the cache needs it, then release finished requests.

        On a cache matchable at allocation, running requests need nothing here (the async delay
        is applied at the next allocation through the known-token cap). A finished request's last
        scheduled token may complete a block the cap held back: vLLM 0.33's
        `Scheduler.update_from_output` catches up with `cache_blocks(request, num_computed_tokens
        - num_in_flight_tokens)` before it checks the stop condition and frees, so that block is
        committed first, then the request is released (a no-op commit in sync mode).
        """
        cache = self.cache
        if not cache.matchable_at_allocation:
            for item in plan.scheduled:
                if not item.seq.is_finished:
                    cache.commit(item.seq, item.seq.num_computed_tokens)
        if self.loads is not None:  # processed after the next plan (HostLoads.after_plan)
            self.loads.finished.extend(finished)
            return
        for seq in finished:
            self.release_finished(seq)
        if self.tier is not None:
            self.tier.host_after_step(finished)

    def release_finished(self, seq: Sequence) -> None:
        """Catch up the finished request's cached blocks (async) and release its KV."""
        self._known_tokens.pop(seq.seq_id, None)
        self._computed_at_preemption.pop(seq.seq_id, None)
        if self.async_scheduling and self.cache.matchable_at_allocation:
            self.cache.commit(seq, seq.num_computed_tokens)
        self.cache.release(seq, finished=True)
