"""`SglangScheduler`: SGLang 0.5.23's non-overlap scheduling step (`managers/scheduler.py`) over any cache.

A step is a prefill (extend) batch when the prefill round admits anything or a chunked request is
in flight; otherwise it is a decode batch of every running request. The two never mix.

    schedule:    commit the in-flight chunk -> filter finished requests out of the running batch
                 -> prefill round (calc_priority, PrefillAdder, head-of-line break) -> else decode
                 (page-aligned memory check, retraction, ratio decay); nothing to run: on_idle
    finish_step: prefill: release finished / commit the rest, merge into the running batch;
                 decode:  release finished as one free group

`commit` is the cache's `cache_unfinished_req`: on radix the content becomes matchable only there;
on APC it was matchable at allocation already and the commit is a no-op.

`self.batch` mirrors upstream `running_batch.reqs`. Requests that finished in a decode step leave it
at the start of the next iteration, before the prefill round, as `get_next_batch_to_run` filters
every iteration (docs/radix.md, the scheduler's iteration order).

`overlap=True` is upstream's `event_loop_overlap` (its GPU default): `finish_step` only merges a
prefill batch into the running batch and keeps the result; `schedule` forms the next batch first
and processes the kept result after it (engines/sched/sglang_overlap.py).
"""

from __future__ import annotations

from collections import deque

from engines.cache.protocol import (
    AnyPrefixCache,
    BudgetedAllocation,
    DecodeRunAllocation,
)
from engines.cache.records import Allocation, CacheIntegrityError
from engines.cache.storage_prefetch import StoragePrefetch
from engines.cache.tiers import HostTier, TreeLoadBack
from engines.sched import sglang_overlap
from engines.sched.base import DecodeRun, ScheduledSeq, Scheduler, StepBudget, StepPlan
from engines.sched.decode_run import fitting_steps, steps_before_finish
from engines.sched.prefill_adder import AddReqResult, PrefillAdder
from engines.sched.prefill_stats import PrefillBatchStats, record_prefill
from engines.sched.sglang_overlap import PendingResult, pending_of, process, release_finished
from engines.sched.sglang_policy import SglangPolicy
from engines.sequence import SeqStatus, Sequence

RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS
BASE_MIN_NEW_TOKEN_RATIO = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600


class SglangScheduler(Scheduler):
    def __init__(
        self,
        cache: AnyPrefixCache,
        policy: str = "fcfs",
        *,
        max_prefill_tokens: int = 16384,
        clip_max_new_tokens: int = 4096,
        schedule_conservativeness: float = 1.0,
        lpm_fallback_queue_len: int = 128,
        in_batch_check_threshold: int = 32,
        in_batch_deprioritize_threshold: int = 32,
        waiting_prefix_refresh: bool = True,
        ignore_eos: bool = False,
        overlap: bool = False,
    ) -> None:
        self.cache = cache
        # decode runs need the cache's DecodeRunAllocation; without it every step is planned
        self.runs = cache if isinstance(cache, DecodeRunAllocation) else None
        # the adder budgets every allocation; a cache without BudgetedAllocation checks it again
        self.budgeted = cache if isinstance(cache, BudgetedAllocation) else None
        self.tier = cache if isinstance(cache, HostTier) else None
        self.tree_load = cache if isinstance(cache, TreeLoadBack) else None
        self.storage = cache if isinstance(cache, StoragePrefetch) else None
        self.policy = SglangPolicy(
            policy,
            cache,
            lpm_fallback_queue_len,
            in_batch_check_threshold,
            in_batch_deprioritize_threshold,
            waiting_prefix_refresh,
        )
        self.max_prefill_tokens = max_prefill_tokens
        self.clip = clip_max_new_tokens
        self.ignore_eos = ignore_eos
        self.init_new_token_ratio = min(0.7 * schedule_conservativeness, 1.0)
        self.min_new_token_ratio = min(self.init_new_token_ratio * BASE_MIN_NEW_TOKEN_RATIO, 1.0)
        self.new_token_ratio_decay = (
            self.init_new_token_ratio - self.min_new_token_ratio
        ) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.new_token_ratio = self.init_new_token_ratio
        self.chunked: Sequence | None = None
        self.batch: list[Sequence] = []
        self.batch_is_full = False
        self.last_prefill: PrefillBatchStats | None = None
        self._last_plan_is_prefill = False
        # seq id -> tokens computed before its retraction
        self._recompute_until: dict[str, int] = {}
        self.overlap = overlap
        self._pending: PendingResult | None = None  # overlap: the result not processed yet

    # ------------------------------------------------------------------ steps
    def schedule(
        self,
        waiting: deque[Sequence],
        running: list[Sequence],
        budget: StepBudget,
        *,
        now_s: float | None = None,
    ) -> StepPlan:
        if self.chunked is not None:
            self.cache.commit(self.chunked, self.chunked.num_computed_tokens)
        if self.storage is not None:  # drain finished prefetches, issue the arrivals' (L3)
            self.storage.storage_round(waiting, now_s)
        self._filter_batch()
        plan = self._prefill_round(waiting, running, budget)
        self._last_plan_is_prefill = plan is not None
        if plan is None:
            plan = self._decode_round(waiting, running)
        if self._pending is not None:  # overlap: the last batch's results, after this one formed
            self._process_pending({seq.seq_id for seq in plan.preempted})
        elif not plan.scheduled:
            self.on_idle()  # upstream's loop found no batch to run
        return plan

    def on_idle(self) -> None:
        """An iteration with nothing to run: its `get_next_batch_to_run` filtered the batch, and
        `self_check_during_idle` starts the ratio over. Under overlap the kept result is processed
        first (an idle loop's next iterations do: the first processes it, the next is idle)."""
        if self._pending is not None:
            self._process_pending(set())
        self._filter_batch()
        self.new_token_ratio = self.init_new_token_ratio

    def _process_pending(self, retracted: set[str]) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            process(self.cache, pending, retracted)

    def transfers_pending(self) -> bool:
        """A storage prefetch is in flight (`PendingTransfers`): an iteration that admits
        nothing while a request waits for one is progress, as upstream's loop keeps polling."""
        return self.storage is not None and self.storage.storage_pending()

    def transfers_due_s(self) -> float | None:
        """When a prefetch read on a priced storage link next lets a waiting request in (its
        read done, or timeout's deadline): an engine with nothing to run idles until then, as
        upstream's loop keeps polling; None without a priced link."""
        return self.storage.storage_due_s() if self.storage is not None else None

    @property
    def in_flight(self) -> frozenset[str]:
        """Requests whose last sampled token upstream has not processed yet (overlap only)."""
        return self._pending.sampled if self._pending is not None else frozenset()

    def finish_step(self, plan: StepPlan, finished: list[Sequence]) -> None:
        if self.overlap:
            self._keep_result(plan)
            return
        cache = self.cache
        if not self._last_plan_is_prefill:
            release_finished(cache, [item.seq for item in plan.scheduled if item.seq.is_finished])
            return
        kept = []
        for item in plan.scheduled:
            seq = item.seq
            if seq is self.chunked:
                continue  # checkpointed at the start of the next round
            if seq.is_finished:
                cache.release(seq, finished=True)
            else:
                cache.commit(seq, seq.num_computed_tokens)
                kept.append(seq)
        if len(kept) < len(plan.scheduled):
            self.batch_is_full = False
        if kept:
            if not self.batch:
                self.batch_is_full = False  # upstream adopts the prefill batch object itself
            self.batch.extend(kept)

    def _keep_result(self, plan: StepPlan) -> None:
        """Overlap: the next `get_next_batch_to_run` merges a prefill batch into the running batch
        before anything of it is processed, so nobody in it is known to have finished; only the
        chunked request stays out. The result waits for the next `schedule`."""
        chunked = self.chunked if self._last_plan_is_prefill else None
        if self._last_plan_is_prefill:
            kept = [item.seq for item in plan.scheduled if item.seq is not chunked]
            if len(kept) < len(plan.scheduled):
                self.batch_is_full = False
            if kept:
                if not self.batch:
                    self.batch_is_full = False
                self.batch.extend(kept)
        self._pending = pending_of(plan, self._last_plan_is_prefill, chunked)

    # ---------------------------------------------------------------- prefill
    def _prefill_round(
        self, waiting: deque[Sequence], running: list[Sequence], budget: StepBudget
    ) -> StepPlan | None:
        running_bs = len(self.batch)
        if (self.batch_is_full or not waiting) and self.chunked is None:
            return None
        if budget.max_num_seqs - running_bs <= 0 and self.chunked is None:
            self.batch_is_full = True
            return None
        self.policy.calc_priority(waiting)
        cache = self.cache
        adder = PrefillAdder(
            cache,
            self.batch,
            self.new_token_ratio,
            self.max_prefill_tokens,
            budget.max_num_batched_tokens,
            self.clip,
            self.ignore_eos,
            self.in_flight,
        )
        if self.chunked is not None:
            self.chunked = adder.add_chunked_req(self.chunked, self.chunked.num_computed_tokens)
        for seq in list(waiting):
            if adder.budget_state() is AddReqResult.OTHER:
                break
            if len(adder.can_run_list) >= budget.max_num_seqs - running_bs:
                self.batch_is_full = True
                break
            if self.storage is not None and not self.storage.storage_ready(seq):
                continue  # its prefetch is in flight and its policy waits for it
            match = cache.match(seq)
            host = 0
            if self.tier is not None:  # HiCache's one walk: the host pages after the device ones
                host = self.tier.host_lookup(seq, match.num_tokens) or 0
            admitted = len(adder.can_run_list)
            result = adder.add_one_req(seq, match, host)
            if host and len(adder.can_run_list) > admitted and self.tree_load is not None:
                last = adder.can_run_list[-1]  # the load-back happens now, as upstream's
                adder.loaded_into_tree(
                    *self.tree_load.host_load_into_tree(seq, match, last.lock, host)
                )
            if result is not AddReqResult.CONTINUE:
                if result is AddReqResult.NO_TOKEN:
                    self.batch_is_full = True
                break
        if not adder.can_run_list:
            return None
        if adder.new_chunked_req is not None:
            self.chunked = adder.new_chunked_req
        return self._start_prefill(adder, waiting, running)

    def _start_prefill(
        self, adder: PrefillAdder, waiting: deque[Sequence], running: list[Sequence]
    ) -> StepPlan:
        admitted = {a.seq.seq_id for a in adder.can_run_list if a.match is not None}
        remaining = [seq for seq in waiting if seq.seq_id not in admitted]
        waiting.clear()
        waiting.extend(remaining)
        # New admissions adopt their matched (locked) prefix: the cache sees them with no computed
        # tokens yet, as the protocol's Allocation.adopt requires.
        batch = [
            Allocation(
                a.seq, a.extend_len + (0 if a.in_tree else a.host_len), adopt=a.match, lock=a.lock
            )
            for a in adder.can_run_list
        ]
        allocate = self.budgeted.allocate_budgeted if self.budgeted else self.cache.allocate
        if not allocate(batch):
            raise CacheIntegrityError("Prefill out of memory: the adder's budget did not hold")
        for a in adder.can_run_list:
            seq = a.seq
            if a.match is not None:
                seq.status = SeqStatus.RUNNING
                seq.num_computed_tokens = a.prefix_len
                if seq.num_cached_tokens is None:
                    seq.num_cached_tokens = a.prefix_len
                    seq.num_host_cached_tokens = a.host_len
                    if self.storage is not None:
                        seq.num_host_cached_tokens, seq.num_storage_cached_tokens = (
                            self.storage.storage_split(seq, a.prefix_len, a.host_len)
                        )
                elif self.storage is not None:
                    self.storage.storage_split(seq, a.prefix_len, a.host_len)  # consumed
                if self.tier is not None:
                    self.tier.host_load(seq, a.prefix_len - a.host_len, a.host_len)
                running.append(seq)
            until = self._recompute_until.get(seq.seq_id)
            if until is not None:
                seq.num_recomputed_tokens += max(
                    0, min(a.prefix_len + a.extend_len, until) - a.prefix_len
                )
        self.last_prefill = record_prefill(self.cache, adder.can_run_list, self._recompute_until)
        rows = [ScheduledSeq(a.seq, a.prefix_len, a.extend_len) for a in adder.can_run_list]
        return StepPlan(rows, extend=True)

    def lone_admission_need(self, prompt_len: int, max_new_tokens: int) -> int:
        """Free KV tokens the prefill adder needs to admit one request into an idle engine: its
        `add_one_req` wants extend + min(max_new, clip) + one page strictly below the free
        tokens. A request needing more than the whole pool can never be admitted."""
        return prompt_len + min(max_new_tokens, self.clip) + self.cache.block_size + 1

    # ----------------------------------------------------------------- decode
    def _decode_round(self, waiting: deque[Sequence], running: list[Sequence]) -> StepPlan:
        """`update_running_batch` on a batch `schedule` has filtered already."""
        initial_bs = len(self.batch)
        # Overlap: requests whose in-flight token finishes them leave the batch unrun
        # (`_reqs_finishing_inflight`); their release waits for the kept result. Without overlap
        # none is in the batch.
        finishing = [seq for seq in self.batch if seq.is_finished]
        if finishing:
            self.batch = [seq for seq in self.batch if not seq.is_finished]
        if not self.batch:
            if initial_bs:
                self.batch_is_full = False
            return StepPlan()
        retracted: list[Sequence] = []
        if not self._check_decode_mem(self.batch):
            if finishing:  # their release frees KV this iteration: decode the rest next one
                self.batch_is_full = False
                return StepPlan()
            retracted = self._retract(waiting, running)
        else:
            self._decay_new_token_ratio()
        if len(self.batch) < initial_bs:
            self.batch_is_full = False
        allocate = self.budgeted.allocate_decode if self.budgeted else self.cache.allocate
        if not allocate([Allocation(seq, 1) for seq in self.batch]):
            raise CacheIntegrityError("Decode out of memory: the memory check did not hold")
        return StepPlan(
            [ScheduledSeq(seq, seq.num_computed_tokens, 1) for seq in self.batch], retracted
        )

    # ------------------------------------------------------------- decode runs
    def plan_decode_run(
        self, waiting: deque[Sequence], running: list[Sequence], budget: StepBudget
    ) -> DecodeRun | None:
        """Steps that are decode batches of the same requests: no chunk in flight, and the prefill
        round returns at once (nobody waiting, or a full batch that this step's filter of finished
        requests does not un-fill), with the decode memory check passing without eviction."""
        if self.runs is None or self.chunked is not None or not self._quiet_pending():
            return None
        if self.storage is not None and self.storage.storage_pending():
            return None  # the next iteration completes a prefetch: step it as upstream does
        batch = self._unfinished_batch()
        if not batch or (waiting and not (self.batch_is_full and len(batch) == len(self.batch))):
            return None
        num_steps = fitting_steps(
            self.runs,
            self.runs.available_tokens(),
            batch,
            steps_before_finish(batch),
            self._decode_headroom(len(batch)),
        )
        return DecodeRun(batch, num_steps) if num_steps > 0 else None

    def apply_decode_run(self, run: DecodeRun, num_steps: int) -> None:
        """`_decode_round` and a decode `finish_step` (which releases nobody) `num_steps` times."""
        if len(run.seqs) < len(self.batch):
            self.batch_is_full = False
        self.batch = list(run.seqs)
        for _ in range(num_steps):  # step by step: the float decay must round as per step
            self._decay_new_token_ratio()
        self._last_plan_is_prefill = False
        if self.runs is None:
            raise TypeError(f"cache {self.cache.name!r} has no decode runs to apply")
        self.runs.allocate_decode_run(
            [Allocation(seq, 1) for seq in run.seqs], num_steps, matchable_lag=0
        )
        if self.overlap:  # the run's last step is the kept result; processing it releases nobody
            plan = StepPlan([ScheduledSeq(seq, seq.num_computed_tokens, 1) for seq in run.seqs])
            self._pending = PendingResult(plan, False, None, frozenset(s.seq_id for s in run.seqs))

    def _quiet_pending(self) -> bool:
        """No kept result, or one whose processing changes nothing (a decode nobody finished in),
        with no finished request left in the batch: only then are the next steps a decode run."""
        pending = self._pending
        if pending is None:
            return True
        if pending.is_prefill or any(item.seq.is_finished for item in pending.plan.scheduled):
            return False
        return not any(seq.is_finished for seq in self.batch)

    def _unfinished_batch(self) -> list[Sequence]:
        """The running batch without the requests that finished in the last decode step (under
        overlap: whose finish was processed; one still in flight stays, as upstream's)."""
        in_flight = self.in_flight
        return [seq for seq in self.batch if not seq.is_finished or seq.seq_id in in_flight]

    def _filter_batch(self) -> None:
        """`filter_batch` at the start of every iteration; a request that left un-fills the batch.
        (An emptied batch is then the empty one that adopts the next prefill batch.)"""
        batch = self._unfinished_batch()
        if len(batch) < len(self.batch):
            self.batch_is_full = False
        self.batch = batch

    def _decay_new_token_ratio(self) -> None:
        self.new_token_ratio = max(
            self.new_token_ratio - self.new_token_ratio_decay, self.min_new_token_ratio
        )

    def _decode_need(self, seqs: list[Sequence]) -> int:
        """`new_tokens_required_next_decode`: a page for each request whose committed length is
        on a page boundary (its next token opens a page), nothing for the others."""
        page = self.cache.block_size
        if page == 1:
            return len(seqs)
        return page * sum(1 for seq in seqs if seq.num_computed_tokens % page == 0)

    def _decode_headroom(self, batch_size: int) -> int:
        """Free tokens a decode step of `batch_size` requests needs so that nothing evicts: the
        step's allocation (`alloc_paged_token_slots_decode`) evicts up to one page per request,
        an over-estimate upstream keeps; it covers the memory check's page-aligned need too."""
        return batch_size * self.cache.block_size

    def _check_decode_mem(self, seqs: list[Sequence]) -> bool:
        need = self._decode_need(seqs)
        self.cache.evict(need)
        return self.cache.free_tokens() >= need

    def _retract(self, waiting: deque[Sequence], running: list[Sequence]) -> list[Sequence]:
        """§7.3: victims (fewest outputs, longest input) from the back until the step fits.
        Returns the victims in retraction order.

        Under overlap outputs count as upstream sees them (an in-flight token not yet; a victim
        loses it); a request whose finish is in flight left the batch before (`_decode_round`)."""
        batch, cache = self.batch, self.cache
        in_flight = self.in_flight
        outputs = [seq.num_output_tokens - (seq.seq_id in in_flight) for seq in batch]
        order = sorted(
            range(len(batch)),
            key=lambda i: (batch[i].is_finished, outputs[i], -batch[i].num_prompt_tokens),
            reverse=True,
        )
        first = True
        victims: list[Sequence] = []
        while first or not self._check_decode_mem([batch[i] for i in order]):
            if len(order) == 1 or batch[order[-1]].is_finished:
                break
            first = False
            seq = batch[order.pop()]
            computed = seq.num_computed_tokens
            cache.release(seq, finished=False)
            if seq.seq_id in in_flight:
                sglang_overlap.unsample(seq)  # upstream samples it again after the re-prefill
            cache.evict(len(order) * RETRACT_DECODE_STEPS)
            self._recompute_until[seq.seq_id] = max(
                self._recompute_until.get(seq.seq_id, 0), computed
            )
            seq.status = SeqStatus.PREEMPTED
            seq.num_computed_tokens = 0
            seq.num_preemptions += 1
            running.remove(seq)
            waiting.append(seq)
            victims.append(seq)
        self.batch = [batch[i] for i in order]
        decoded = sum(outputs[i] for i in order)
        max_new = sum(seq.max_new_tokens for seq in self.batch)
        self.new_token_ratio = min(
            1.0, (decoded + RETRACT_DECODE_STEPS * len(self.batch)) / (max_new + 1)
        )
        return victims
