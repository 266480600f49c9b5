"""`ApcAdmission`: vLLM V1's scheduler contract over an ApcCache (docs/apc.md §5-§8).

One step: (1) running requests first, each allocating its next tokens and preempting the last
running request on failure (to the FRONT of waiting); (2) only if nothing was preempted, waiting
requests in queue order with head-of-line blocking, under one token budget (chunked prefill) and
`max_num_seqs`. Async scheduling (v0.33 default) caches a block completed by a generated token one
step later, because upstream schedules that token as a placeholder before it is known (§5.3).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from engines.cache.apc.cache import ApcCache
from engines.cache.apc.dfs_weight import dfs_weight_order
from engines.cache.base import ScheduledSeq, StepBudget, StepPlan
from engines.registry import Registry
from engines.sequence import SeqStatus, Sequence

WaitingOrder = Callable[[deque], None]

# policy -> factory(cache, lpm_fallback_queue_len) -> in-place reordering of the waiting queue
WAITING_ORDERS: Registry[Callable[[ApcCache, int], WaitingOrder]] = Registry("policy")


@WAITING_ORDERS.register("fcfs")
def _fcfs(cache: ApcCache, fallback_len: int) -> WaitingOrder:
    return lambda waiting: None


@WAITING_ORDERS.register("lpm")
def _lpm(cache: ApcCache, fallback_len: int) -> WaitingOrder:
    """Stable sort by descending uncapped match; kept as is above `fallback_len` waiting (a
    project extension mirroring SGLang's lpm, so policy and data-structure effects separate)."""

    def order(waiting: deque) -> None:
        if len(waiting) <= 1 or len(waiting) > fallback_len:
            return
        ranked = sorted(waiting, key=lambda s: -cache.match(s, capped=False).num_tokens)
        waiting.clear()
        waiting.extend(ranked)

    return order


@WAITING_ORDERS.register("dfs-weight")
def _dfs_weight(cache: ApcCache, fallback_len: int) -> WaitingOrder:
    """SGLang's dfs-weight over the hash chains (never falls back, as upstream)."""

    def hit_keys(seq: Sequence) -> list[bytes]:
        num_hit = cache.match(seq, capped=False).num_tokens // cache.block_size
        return cache.manager.block_keys(seq)[:num_hit]

    def order(waiting: deque) -> None:
        if len(waiting) > 1:
            ranked = dfs_weight_order(waiting, hit_keys)
            waiting.clear()
            waiting.extend(ranked)

    return order


class ApcAdmission:
    def __init__(
        self,
        cache: ApcCache,
        *,
        policy: str = "fcfs",
        reserve_full_prompt: bool = True,
        async_scheduling: bool = True,
        lpm_fallback_queue_len: int = 128,
    ) -> None:
        self.cache = cache
        self.manager = cache.manager
        self.reserve_full_prompt = reserve_full_prompt
        self.async_scheduling = async_scheduling
        self._order = WAITING_ORDERS.get(policy)(cache, lpm_fallback_queue_len)
        # async: seq_id -> num_tokens known when its last step was planned (before the sample)
        self._known_tokens: dict[str, int] = {}
        # seq_id -> num_computed_tokens when preempted (for num_recomputed_tokens)
        self._computed_at_preemption: dict[str, int] = {}

    def schedule(
        self, waiting: deque[Sequence], running: list[Sequence], budget: StepBudget
    ) -> StepPlan:
        plan = StepPlan()
        self._order(waiting)
        token_budget = self._schedule_running(plan, waiting, running, budget.max_num_batched_tokens)
        if not plan.preempted:
            self._schedule_waiting(plan, waiting, running, budget, token_budget)
        return plan

    def _schedule_running(
        self, plan: StepPlan, waiting: deque, running: list, token_budget: int
    ) -> int:
        i = 0
        while i < len(running) and token_budget > 0:
            seq = running[i]
            num_new = min(seq.num_tokens - seq.num_computed_tokens, token_budget)
            if num_new <= 0:
                i += 1
                continue
            known = self._known_tokens.pop(seq.seq_id, None)
            while True:
                blocks = self.manager.allocate_slots(seq, num_new, num_known_tokens=known)
                if blocks is not None:
                    break
                victim = running.pop()  # FCFS: the lowest priority is the last running request
                self._preempt(victim, waiting)
                plan.preempted.append(victim)
                if victim is seq:
                    break
            if blocks is None:
                break
            self._add(plan, seq, seq.num_computed_tokens, num_new)
            token_budget -= num_new
            i += 1
        return token_budget

    def _schedule_waiting(
        self, plan: StepPlan, waiting: deque, running: list, budget: StepBudget, token_budget: int
    ) -> None:
        mgr = self.manager
        while waiting and token_budget > 0 and len(running) < budget.max_num_seqs:
            seq = waiting[0]
            hit_blocks, num_hit = (
                mgr.get_computed_blocks(seq) if seq.num_computed_tokens == 0 else ([], 0)
            )
            num_computed = seq.num_computed_tokens + num_hit
            num_new = min(seq.num_tokens - num_computed, token_budget)
            blocks = mgr.allocate_slots(
                seq, num_new, num_hit, hit_blocks, full_sequence_must_fit=self.reserve_full_prompt
            )
            if blocks is None:
                break  # head-of-line blocking: nothing behind it is tried this step
            waiting.popleft()
            running.append(seq)
            if seq.status is SeqStatus.PREEMPTED:
                before = self._computed_at_preemption.pop(seq.seq_id, 0)
                seq.num_recomputed_tokens += max(before - num_computed, 0)
            seq.status = SeqStatus.RUNNING
            seq.num_computed_tokens = num_computed
            if seq.num_cached_tokens is None:
                seq.num_cached_tokens = num_computed
            mgr.record_admission(seq, num_hit)
            self._add(plan, seq, num_computed, num_new)
            token_budget -= num_new

    def _add(self, plan: StepPlan, seq: Sequence, start: int, num_new: int) -> None:
        plan.scheduled.append(ScheduledSeq(seq, start, num_new))
        if self.async_scheduling and start + num_new == seq.num_tokens:
            # This step samples a token; upstream schedules it next step as a placeholder that
            # request.num_tokens (the caching cap) does not include yet.
            self._known_tokens[seq.seq_id] = seq.num_tokens

    def _preempt(self, seq: Sequence, waiting: deque) -> None:
        self._computed_at_preemption[seq.seq_id] = seq.num_computed_tokens
        self.manager.free(seq)  # hashes are kept: the tokens do not change
        self._known_tokens.pop(seq.seq_id, None)
        seq.status = SeqStatus.PREEMPTED
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        waiting.appendleft(seq)

    def finish_step(self, plan: StepPlan, finished: list[Sequence]) -> None:
        """Release finished sequences. Running decode blocks need nothing here: the async
        one-step delay is applied at the next allocation through the known-token cap.

        A finished request is the exception. Its last scheduled token (the second-to-last
        sampled one) may complete a block that the known-token cap held back; vLLM's
        `Scheduler.update_from_output` (0.33) catches up with `cache_blocks(request,
        num_computed_tokens - num_in_flight_tokens)` before it checks the stop condition and
        frees, so that block is cached first, then the table is freed. Only a block that the
        final sampled token alone would complete stays uncached (that token is never scheduled).
        In sync mode the block was cached at allocation and the catch-up is a no-op.
        """
        for seq in finished:
            self._known_tokens.pop(seq.seq_id, None)
            self._computed_at_preemption.pop(seq.seq_id, None)
            if self.async_scheduling:
                self.manager.catch_up_cached_blocks(seq)
            self.cache.release(seq, finished=True)
