"""The engine loop: release requests on the run clock, schedule, execute, record.

    arrivals ──▶ StepLoop.waiting ──Admission──▶ StepPlan ──Executor──▶ tokens ──▶ complete()
        ▲                                                                               │
        └──── multi-turn: a request `after` X is released think_s after X finishes ◀────┘

With an executor that supports decode runs (the simulated one), a stretch of pure decode is
advanced as one macro-step with the same outcome (engines/cache/base.py `DecodeRun`).
Records accumulate in `self.records` as requests finish, so a caller that is interrupted still
has every finished row.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from engines.cache.base import PrefixCache
from engines.errors import BadInput
from engines.fits import admission_problem
from engines.loop import StepLoop
from engines.records import RequestRecord
from engines.request import GenerationRequest
from engines.sequence import Sequence

# A decode run shorter than this is stepped normally (same result; planning one costs a little).
MIN_RUN_STEPS = 2


class CapacityError(BadInput):
    """A request can never run: it needs more KV than the engine has."""


@dataclass
class _Timeline:
    arrival_s: float
    scheduled_s: float | None = None
    # 8 bytes a token (a float object in a list costs 32): a whole trace emits ~4e6 tokens.
    token_times_s: array = field(default_factory=lambda: array("d"))


class Engine:
    def __init__(self, loop: StepLoop, executor, max_model_len: int | None = None) -> None:
        self.loop = loop
        self.executor = executor
        self.cache: PrefixCache = loop.cache
        self.max_model_len = max_model_len
        self.records: list[RequestRecord] = []

    @property
    def clock(self):
        return self.executor.clock

    def check_fits(self, requests: list[GenerationRequest]) -> None:
        """Fail before running if any request can never fit (named, with its need)."""
        capacity = self.cache.capacity_tokens
        for req in requests:
            need = len(req.prompt_ids) + req.max_new_tokens
            if self.max_model_len is not None and need > self.max_model_len:
                raise CapacityError(
                    f"request {req.request_id} needs {need} tokens (prompt {len(req.prompt_ids)} + "
                    f"output {req.max_new_tokens}) but the model's context is {self.max_model_len}"
                )
            if need > capacity:
                raise CapacityError(
                    f"request {req.request_id} needs {need} KV tokens (prompt {len(req.prompt_ids)} + "
                    f"output {req.max_new_tokens}) but engine.kv_capacity_tokens is {capacity}"
                )
            admission_problem(self.loop.admission, req, capacity)

    def run(
        self,
        requests: list[GenerationRequest],
        on_finish: Callable[[RequestRecord], None] | None = None,
        max_concurrency: int | None = None,
    ) -> list[RequestRecord]:
        """Run `requests` to completion. `max_concurrency` is a client-side cap on requests in
        flight (`vllm bench serve --max-concurrency`): a request due while the cap is reached is
        sent, and its arrival_s taken, when the finish that freed a slot happens."""
        self.check_fits(requests)
        self.records = []
        self.clock.restart()
        by_id = {r.request_id: r for r in requests}
        followers: dict[str, list[GenerationRequest]] = {}
        ready: list[tuple[float, int, str]] = []  # (release time, order, request_id)
        for order, req in enumerate(requests):
            if req.after is not None and req.after in by_id:
                followers.setdefault(req.after, []).append(req)
            else:
                heapq.heappush(ready, (req.arrival_s, order, req.request_id))
        order_of = {r.request_id: i for i, r in enumerate(requests)}
        timelines: dict[str, _Timeline] = {}
        unscheduled: set[str] = set()  # released, never scheduled yet (scheduled_s unset)
        sched = self.loop
        runs = getattr(self.executor, "decode_runs", False)
        idle_steps = 0
        slot_freed_s = 0.0  # when the cap last stopped being reached
        cap = max_concurrency if max_concurrency is not None else len(requests) + 1
        while ready or sched.has_work:
            now = self.clock.now()
            while ready and ready[0][0] <= now and len(timelines) < cap:
                t_s, _, rid = heapq.heappop(ready)
                req = by_id[rid]
                timelines[rid] = _Timeline(arrival_s=max(t_s, slot_freed_s))
                unscheduled.add(rid)
                sched.add(_sequence(req))
            if not sched.has_work:
                self.clock.wait_until(ready[0][0])
                continue
            if runs and self._decode_run(
                timelines, ready[0][0] if ready and len(timelines) < cap else math.inf
            ):
                idle_steps = 0
                continue
            plan = sched.schedule()
            step_start = now
            if not plan.scheduled:
                idle_steps += 1
                if ready and len(timelines) < cap:
                    self.clock.wait_until(ready[0][0])
                    continue
                if idle_steps > 2:
                    stuck = (sched.waiting or sched.running)[0]
                    raise CapacityError(
                        f"request {stuck.seq_id} cannot be scheduled: the engine made no progress "
                        f"with {len(sched.waiting)} waiting and {len(sched.running)} running"
                    )
                continue
            idle_steps = 0
            tokens = self.executor.execute(plan)
            end = self.clock.now()
            if unscheduled:  # skipped in decode-only stretches: no per-sequence work here
                for item in plan.scheduled:
                    rid = item.seq.seq_id
                    if rid in unscheduled:
                        unscheduled.discard(rid)
                        timelines[rid].scheduled_s = step_start
            for rid in tokens:
                timelines[rid].token_times_s.append(end)
            for seq in sched.complete(plan, tokens):
                if len(timelines) == cap:
                    slot_freed_s = end
                # Drop finished state: a whole-trace replay holds ~10^8 tokens otherwise.
                record = _record(seq, by_id[seq.seq_id], timelines.pop(seq.seq_id))
                self.records.append(record)
                if on_finish is not None:
                    on_finish(record)
                for nxt in followers.pop(seq.seq_id, []):
                    release_s = end + nxt.think_s
                    heapq.heappush(ready, (release_s, order_of[nxt.request_id], nxt.request_id))
        return self.records

    def _decode_run(self, timelines: dict[str, _Timeline], next_release_s: float) -> bool:
        """Advance a stretch of pure decode in one macro-step if the next steps are one (at least
        MIN_RUN_STEPS), stopping at the step that reaches the next release: the same steps, clock
        and token times as stepping one by one."""
        run = self.loop.plan_decode_run()
        if run is None or run.max_steps < MIN_RUN_STEPS:
            return False
        result = self.executor.execute_decode_run(run, next_release_s)
        self.loop.complete_decode_run(run, result.tokens)
        for seq in run.seqs:
            timelines[seq.seq_id].token_times_s.extend(result.end_times_s)
        return True


def _sequence(req: GenerationRequest) -> Sequence:
    return Sequence(
        seq_id=req.request_id,
        token_ids=_token_ids(req.prompt_ids),
        num_prompt_tokens=len(req.prompt_ids),
        max_new_tokens=req.max_new_tokens,
        salt=req.salt,
        lora_id=req.lora_id,
        priority=req.priority,
        arrival_s=req.arrival_s,
        scripted_output_ids=req.scripted_output_ids,
    )


def _token_ids(prompt_ids) -> list[int] | array:
    """The sequence's own growable copy of the prompt: a compact prompt (array('i'), whole-trace
    replays) stays one, a memcpy instead of ~12k int objects per request (caches read both)."""
    if isinstance(prompt_ids, array):
        return array(prompt_ids.typecode, prompt_ids)
    return list(prompt_ids)


def _record(seq: Sequence, req: GenerationRequest, tl: _Timeline) -> RequestRecord:
    times = tl.token_times_s
    return RequestRecord(
        request_id=req.request_id,
        parent_id=req.parent_id or req.request_id,
        sample_index=req.sample_index,
        prompt_tokens=seq.num_prompt_tokens,
        cached_tokens=seq.num_cached_tokens or 0,
        output_tokens=seq.num_output_tokens,
        recomputed_tokens=seq.num_recomputed_tokens,
        num_preemptions=seq.num_preemptions,
        arrival_s=tl.arrival_s,
        scheduled_s=tl.scheduled_s if tl.scheduled_s is not None else tl.arrival_s,
        first_token_s=times[0],
        finish_s=times[-1],
        token_times_s=times,
        output_ids=tuple(seq.token_ids[seq.num_prompt_tokens :]),
    )
