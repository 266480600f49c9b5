"""The step loop: waiting and running lists, one scheduler contract, token bookkeeping; design-free.

Per step:  scheduler.schedule(waiting, running) -> StepPlan -> executor runs it -> `complete()`
advances each scheduled sequence, appends the token it produced, finishes sequences that reached
their length, and lets the scheduler make the step's tokens matchable and release finished KV.
Everything a scheduler design decides (ordering, admission, preemption) lives in its Scheduler
(engines/sched/), which drives the cache through its protocols; this loop is identical for every
pairing. Time spent in the scheduler is the bookkeeping cost, measured here for both executors.

An executor that supports decode runs (the simulated one) advances stretches of pure decode in one
macro-step: `plan_decode_run` sizes it, `complete_decode_run` applies as many steps as ran, with
the same effect on sequences, scheduler and cache as that many `schedule`/`complete` rounds.

With `step_log` on, each completed step (a decode run: each of its steps) appends a StepRecord
(engines/step_log.py) to `self.step_log`; `idle()` tells the scheduler that an iteration found no work.
"""

from __future__ import annotations

import time
from collections import deque

from engines.sched.base import DecodeRun, Scheduler, StepBudget, StepPlan
from engines.sequence import SeqStatus, Sequence
from engines.step_log import StepRecord, decode_steps, record_step


class StepLoop:
    def __init__(
        self,
        scheduler: Scheduler,
        budget: StepBudget,
        debug_checks: bool = False,
        step_log: bool = False,
    ) -> None:
        self.scheduler = scheduler
        self.cache = scheduler.cache
        self.budget = budget
        self.debug_checks = debug_checks
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.bookkeeping_ns = 0
        self.num_steps = 0
        # Every step since the engine was built (not reset with num_steps); None when off.
        self.step_log: list[StepRecord] | None = [] if step_log else None
        self._running_before: set[str] = set()

    def reset_counters(self) -> None:
        self.bookkeeping_ns = 0
        self.num_steps = 0

    def add(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def find(self, seq_id: str) -> Sequence | None:
        """The waiting or running sequence of that id (a scan: for aborts, not per step)."""
        return next((s for s in (*self.waiting, *self.running) if s.seq_id == seq_id), None)

    def drop_waiting(self, seq: Sequence) -> bool:
        """Remove `seq` from the queue if it waits without any computed KV (never admitted, or
        preempted and freed); False otherwise (it runs, or a chunk of it is in flight)."""
        if seq.num_computed_tokens or seq not in self.waiting:
            return False
        self.waiting.remove(seq)
        return True

    def idle(self) -> None:
        """An iteration with nothing to run (no request waiting or running)."""
        self.scheduler.on_idle()

    def schedule(self, launched_s: float | None = None, now_s: float | None = None) -> StepPlan:
        """The next step's plan. `launched_s` (SGLang's overlap loop, None otherwise): when the
        step still in flight started. Sequences received after it reached upstream's queue after
        this formation's receive: they wait for the next one, which, when this iteration launches
        nothing, follows at once (upstream's loop spins: process the last result, receive, form).
        `now_s`: the iteration's time on the run clock, passed to the scheduler."""
        late = self._take_late(launched_s) if launched_s is not None else []
        plan = self._schedule_once(now_s)
        if late:
            self.waiting.extend(late)
            if not plan.scheduled:
                plan = self._schedule_once(now_s)
        return plan

    def _take_late(self, launched_s: float) -> list[Sequence]:
        """The queue's tail received after `launched_s` (arrivals join at the tail between
        steps), removed from the queue in order."""
        late: list[Sequence] = []
        while self.waiting and self.waiting[-1].received_s > launched_s:
            late.append(self.waiting.pop())
        late.reverse()
        return late

    def _schedule_once(self, now_s: float | None) -> StepPlan:
        if self.step_log is not None:
            self._running_before = {seq.seq_id for seq in self.running}
        t0 = time.perf_counter_ns()
        plan = self.scheduler.schedule(self.waiting, self.running, self.budget, now_s=now_s)
        self.bookkeeping_ns += time.perf_counter_ns() - t0
        return plan

    def plan_decode_run(self) -> DecodeRun | None:
        """The decode run the next steps would be (see `DecodeRun`), or None."""
        t0 = time.perf_counter_ns()
        run = self.scheduler.plan_decode_run(self.waiting, self.running, self.budget)
        self.bookkeeping_ns += time.perf_counter_ns() - t0
        return run

    def complete_decode_run(self, run: DecodeRun, tokens: dict[str, list[int]]) -> None:
        """Apply the executed first steps of `run`: `tokens` maps seq_id -> the token each step
        sampled (one per step, the same count for every sequence). Nobody finishes in a run."""
        num_steps = len(tokens[run.seqs[0].seq_id])
        for seq in run.seqs:  # appended first: a cache hashes the blocks the run completes
            seq.token_ids.extend(tokens[seq.seq_id])
        t0 = time.perf_counter_ns()
        self.scheduler.apply_decode_run(run, num_steps)
        self.bookkeeping_ns += time.perf_counter_ns() - t0
        for seq in run.seqs:
            seq.num_computed_tokens += num_steps
        if self.step_log is not None:
            ids = tuple(seq.seq_id for seq in run.seqs)
            self.step_log.extend(decode_steps(len(self.step_log), ids, num_steps))
        self.num_steps += num_steps
        if self.debug_checks:
            self.cache.check_integrity()

    def complete(self, plan: StepPlan, next_tokens: dict[str, int]) -> list[Sequence]:
        """Apply an executed plan. `next_tokens` maps seq_id -> the token sampled for every
        sequence whose step reached its last known token. Returns the sequences that finished."""
        if self.step_log is not None:  # before the sequences advance: kinds read their state
            self.step_log.append(record_step(len(self.step_log), plan, self._running_before))
        finished: list[Sequence] = []
        for item in plan.scheduled:
            seq = item.seq
            seq.num_computed_tokens = item.end
            token = next_tokens.get(seq.seq_id)
            if token is None:
                continue
            seq.token_ids.append(token)
            if seq.done_generating:
                seq.status = SeqStatus.FINISHED
                finished.append(seq)
        if finished:
            done = {id(s) for s in finished}
            self.running[:] = [s for s in self.running if id(s) not in done]
        t0 = time.perf_counter_ns()
        self.scheduler.finish_step(plan, finished)
        self.bookkeeping_ns += time.perf_counter_ns() - t0
        self.num_steps += 1
        if self.debug_checks:
            self.cache.check_integrity()
        return finished
