"""The engine: an incremental interface over the step loop, the executor and the front stage.

    submit(CompletionRequest) ─frontend─▶ children ─▶ StepLoop.waiting
    step():  StepLoop.schedule ─▶ StepPlan ─Executor─▶ tokens ─▶ StepLoop.complete ─▶ StepOutput
    abort_request(id): the child (or every child of a parent) finishes at its next step, unrecorded

Held children: a child whose `wait_for` names another child in flight is kept out of the step
loop until that child finishes, then queued in the same step (SGLang's front stage awaits its
prefix request before sending the samples, engines/frontend.py). A `prefill_only` child's record
goes to `frontend_records`, not `records`, and does not count towards its parent's samples.

The engine knows nothing of arrival schedules, concurrency caps or conversations: a client drives
it (harness/client/), in-process or behind a server (harness/builtin_server/). With an executor that
supports decode runs (the simulated one), `step` advances a stretch of pure decode as one
macro-step with the same outcome (engines/sched/base.py `DecodeRun`), stopping before the
caller's next release. Finished children are returned by the step that finished them and kept in
`records`, so a caller that is interrupted still has every finished row.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from collections.abc import Sequence as Ids
from dataclasses import dataclass, field

from engines.cache.protocol import AnyPrefixCache
from engines.clock import RunClock
from engines.errors import BadInput
from engines.executor import Executor
from engines.fits import admission_problem
from engines.frontend import Frontend
from engines.host_link import CarriesHostLink
from engines.loop import StepLoop
from engines.records import RequestRecord
from engines.request import CompletionRequest, GenerationRequest
from engines.sched.base import PendingTransfers
from engines.sequence import Sequence

# A decode run shorter than this is stepped normally (same result; planning one costs a little).
MIN_RUN_STEPS = 2


class CapacityError(BadInput):
    """A request can never run: it needs more KV than the engine has."""


@dataclass(frozen=True)
class StepOutput:
    """What one `Engine.step` did. `progressed` is False when it scheduled nothing and moved no
    pending host-tier transfer on (a driver may then wait for the next arrival)."""

    end_s: float  # the run clock after the step
    progressed: bool
    num_steps: int = 0  # steps taken (a decode run takes several)
    tokens: dict[str, list[int]] = field(default_factory=dict)  # child id -> tokens, in order
    finished: list[RequestRecord] = field(default_factory=list)  # children that finished
    finished_parents: list[str] = field(default_factory=list)  # requests whose samples all did


@dataclass
class _Timeline:
    request: GenerationRequest
    arrival_s: float
    scheduled_s: float | None = None
    # 8 bytes a token (a float object in a list costs 32): a whole trace emits ~4e6 tokens.
    token_times_s: array[float] = field(default_factory=lambda: array("d"))
    aborted: bool = False


class Engine:
    def __init__(
        self,
        loop: StepLoop,
        executor: Executor,
        frontend: Frontend,
        max_model_len: int | None = None,
        blocking_forward: bool = False,
    ) -> None:
        self.loop = loop
        self.executor = executor
        # a host tier's stored tokens in bytes (the executor's host link knows the model's KV)
        link = executor.host_link if isinstance(executor, CarriesHostLink) else None
        self._kv_bytes_per_token = link.bytes_per_token if link is not None else 0.0
        self.frontend = frontend
        self.cache: AnyPrefixCache = loop.cache
        self.max_model_len = max_model_len
        self.records: list[RequestRecord] = []
        self._timelines: dict[str, _Timeline] = {}  # children in flight
        self._unscheduled: set[str] = set()  # in flight, never scheduled yet
        # retracted with a token already emitted that their re-prefill samples again
        self._resampled: set[str] = set()
        self._children_left: dict[str, int] = {}  # parent id -> children not finished
        self._held: dict[str, list[tuple[GenerationRequest, float]]] = {}  # wait_for -> children
        self.frontend_records: list[RequestRecord] = []  # the front stage's prefill-only children
        self._idle_steps = 0
        # SGLang's overlap loop: when the step in flight started (None: nothing in flight)
        self._launched_s: float | None = None
        # SGLang's overlap loop on a host whose forward blocks the launch (CPU): the next
        # receive follows the forward, so arrivals during a step are not held back a formation
        self._late_receive = loop.scheduler.overlap and not blocking_forward

    @property
    def clock(self) -> RunClock:
        return self.executor.clock

    @property
    def has_work(self) -> bool:
        return self.loop.has_work or bool(self._held)

    def check_fits(self, requests: Iterable[GenerationRequest | CompletionRequest]) -> None:
        """Fail before running if any request can never fit (named, with its need)."""
        for req in requests:
            self._check_fits(req.request_id, len(req.prompt_ids), req.max_new_tokens)

    def _check_fits(self, request_id: str, prompt_len: int, max_new_tokens: int) -> None:
        need = prompt_len + max_new_tokens
        what = f"(prompt {prompt_len} + output {max_new_tokens})"
        if self.max_model_len is not None and need > self.max_model_len:
            raise CapacityError(
                f"request {request_id} needs {need} tokens {what} but the model's context is "
                f"{self.max_model_len}"
            )
        capacity = self.cache.capacity_tokens
        if need > capacity:
            raise CapacityError(
                f"request {request_id} needs {need} KV tokens {what} but "
                f"engine.kv_capacity_tokens is {capacity}"
            )
        admission_problem(self.loop.scheduler, request_id, prompt_len, max_new_tokens, capacity)

    def in_flight_timelines(self) -> list[_Timeline]:
        """The timelines of the children in flight (a checkpoint saves them, engines/snapshot.py)."""
        return list(self._timelines.values())

    def idle(self) -> None:
        """Nothing is waiting or running: a scheduler design may reset state here (SGLang resets
        its new-token ratio on an idle iteration). Drivers call it whenever the engine idles."""
        self.loop.idle()
        if isinstance(self.executor, CarriesHostLink):  # a tier stores what finished last
            self.executor.host_idle()
        self._launched_s = None  # an idle loop receives every request before its next formation

    def reset_counters(self) -> None:
        """Zero the step count and the cache-bookkeeping time: a measured window after a flush
        counts its own steps only (the step log, if on, keeps every step since the build)."""
        self.loop.reset_counters()
        if isinstance(self.executor, CarriesHostLink) and self.executor.host_link is not None:
            self.executor.host_link.reset()  # and its host-tier transfers

    def restart(self) -> None:
        """A new run from an idle engine: the clock from zero, no records."""
        if self.has_work:
            raise RuntimeError("restart() while requests are in flight")
        self.records = []
        self.frontend_records = []
        self.clock.restart()
        self._launched_s = None

    def submit(self, req: CompletionRequest, arrival_s: float) -> list[str]:
        """Queue an API request: checked, split by the front stage; returns the children's ids."""
        self._check_fits(req.request_id, len(req.prompt_ids), req.max_new_tokens)
        return self._queue(self.frontend.split(req), arrival_s)

    def submit_batch(self, reqs: list[CompletionRequest], arrival_s: float) -> list[str]:
        """Queue API requests sent together as one program batch (SGLang's frontend precaches
        their common prefix first; vLLM has no batch path): the samples' ids."""
        for req in reqs:
            self._check_fits(req.request_id, len(req.prompt_ids), req.max_new_tokens)
        return self._queue(self.frontend.split_batch(reqs), arrival_s)

    def _queue(self, children: list[GenerationRequest], arrival_s: float) -> list[str]:
        samples = [c for c in children if not c.prefill_only]
        for child in samples:
            parent = child.parent_id or child.request_id
            self._children_left[parent] = self._children_left.get(parent, 0) + 1
        for child in children:
            if child.wait_for is not None:
                self._held.setdefault(child.wait_for, []).append((child, arrival_s))
            else:
                self.add_request(child, arrival_s)
        return [c.request_id for c in samples]

    def add_request(
        self, req: GenerationRequest, arrival_s: float, received_s: float | None = None
    ) -> None:
        """Queue one child as released at `arrival_s` on the run clock (reaching the scheduler at
        `received_s`, by default then too)."""
        if req.request_id in self._timelines:
            raise BadInput(f"request {req.request_id} is already in flight")
        self._timelines[req.request_id] = _Timeline(req, arrival_s)
        self._unscheduled.add(req.request_id)
        seq = _sequence(req, arrival_s)
        seq.received_s = arrival_s if received_s is None else received_s
        self.loop.add(seq)

    def abort_request(self, request_id: str) -> bool:
        """Drop a child, or every child of a parent id. A waiting child leaves at once; a running
        one finishes at its next step (SGLang's abort path: its KV is released and cached as on
        any finish), and neither is recorded. False if nothing by that id is in flight."""
        ids = [
            rid for rid, tl in self._timelines.items() if request_id in (rid, tl.request.parent_id)
        ]
        held_ids = self._drop_held(request_id)
        for rid in ids:
            self._timelines[rid].aborted = True
            seq = self.loop.find(rid)
            if seq is not None and self.loop.drop_waiting(seq):  # it never held KV
                self._child_done(self._forget(rid))
                self._release_held(rid)
            elif seq is not None:
                seq.max_new_tokens = seq.num_output_tokens + 1
        return bool(ids or held_ids)

    def _drop_held(self, request_id: str) -> list[str]:
        """Drop held children named `request_id` or whose parent it is (each counted out of its
        parent, as any aborted child); their ids."""
        dropped: list[GenerationRequest] = []
        for key, held in list(self._held.items()):
            kept = [(c, t) for c, t in held if request_id not in (c.request_id, c.parent_id)]
            dropped += [c for c, _ in held if request_id in (c.request_id, c.parent_id)]
            if kept:
                self._held[key] = kept
            else:
                del self._held[key]
        for child in dropped:
            self._count_out(child)
        return [c.request_id for c in dropped]

    def _release_held(self, request_id: str) -> None:
        """`request_id` finished (or left): queue the children that waited for it."""
        for child, arrival_s in self._held.pop(request_id, []):
            self.add_request(child, arrival_s, received_s=self.clock.now())

    def step(self, next_release_s: float = math.inf) -> StepOutput:
        """One scheduling step, or a decode run that ends before `next_release_s`."""
        if self.executor.decode_runs:
            out = self._decode_run(next_release_s)
            if out is not None:
                return out
        now = self.clock.now()
        plan = self.loop.schedule(self._launched_s if self._late_receive else None, now)
        self._launched_s = now if plan.scheduled else None
        if not plan.scheduled:
            return self._no_progress(next_release_s)
        if plan.preempted:
            self._note_unsampled(plan.preempted)
        self._idle_steps = 0
        sampled = self.executor.execute(plan)
        end = self.clock.now()
        if self._unscheduled:  # skipped in decode-only stretches: no per-sequence work here
            for item in plan.scheduled:
                rid = item.seq.seq_id
                if rid in self._unscheduled:
                    self._unscheduled.discard(rid)
                    self._timelines[rid].scheduled_s = now
        tokens: dict[str, list[int]] = {}
        for rid, token in sampled.items():
            if self._resampled and rid in self._resampled:
                self._resampled.discard(rid)  # emitted when first sampled: a stream never repeats
                continue
            self._timelines[rid].token_times_s.append(end)
            tokens[rid] = [token]
        finished, parents = self._finish(self.loop.complete(plan, sampled))
        return StepOutput(end, True, 1, tokens, finished, parents)

    def _note_unsampled(self, retracted: list[Sequence]) -> None:
        """Retracted requests that lost an emitted token (SGLang's overlap loop drops a retracted
        request's in-flight token, engines/sched/sglang_overlap.py `unsample`): the token their
        re-prefill samples again is not emitted twice, and keeps its first time."""
        for seq in retracted:
            if len(self._timelines[seq.seq_id].token_times_s) > seq.num_output_tokens:
                self._resampled.add(seq.seq_id)

    def _no_progress(self, next_release_s: float) -> StepOutput:
        """Nothing could be scheduled: fine while a release is due, a stuck engine otherwise."""
        scheduler = self.loop.scheduler
        if isinstance(scheduler, PendingTransfers) and scheduler.transfers_pending():
            # Progress: the step moved a host load or a release on, and the next step may
            # schedule what it unblocked. vLLM's engine core keeps iterating while a load is in
            # flight; reporting no progress made drivers jump to the next arrival, the request
            # idle meanwhile. No clock advance is owed for a load: it completes at the iteration
            # after its plan (HostLoads.after_plan) and its link time is priced on the step that
            # runs the loaded request (engines/host_link.py), so these steps are a short bounded
            # run. A storage read priced on its own clock (SGLang's prefetch over a priced
            # storage link) starts now, and the engine idles until it lets a request in (or the
            # next release comes), as upstream's loop polls until then.
            if isinstance(self.executor, CarriesHostLink):
                self.executor.host_waiting()
            due_s = scheduler.transfers_due_s()
            if due_s is not None:
                self.clock.wait_until(min(due_s, next_release_s))
            return StepOutput(self.clock.now(), True)
        self._idle_steps += 1
        if self._idle_steps > 2 and next_release_s == math.inf and self.has_work:
            stuck = (self.loop.waiting or self.loop.running)[0]
            raise CapacityError(
                f"request {stuck.seq_id} cannot be scheduled: the engine made no progress with "
                f"{len(self.loop.waiting)} waiting and {len(self.loop.running)} running"
            )
        return StepOutput(self.clock.now(), False)

    def _decode_run(self, next_release_s: float) -> StepOutput | None:
        """Advance a stretch of pure decode in one macro-step if the next steps are one (at least
        MIN_RUN_STEPS), stopping at the step that reaches the next release: the same steps, clock
        and token times as stepping one by one."""
        run = self.loop.plan_decode_run()
        if run is None or run.max_steps < MIN_RUN_STEPS:
            return None
        start = self.clock.now()
        result = self.executor.execute_decode_run(run, next_release_s)
        self.loop.complete_decode_run(run, result.tokens)
        ends = result.end_times_s
        self._launched_s = ends[-2] if len(ends) > 1 else start  # the run's last step started
        self._idle_steps = 0
        for seq in run.seqs:
            self._timelines[seq.seq_id].token_times_s.extend(result.end_times_s)
        steps = len(result.end_times_s)
        return StepOutput(self.clock.now(), True, steps, result.tokens)

    def _finish(self, seqs: list[Sequence]) -> tuple[list[RequestRecord], list[str]]:
        records: list[RequestRecord] = []
        parents: list[str] = []
        for seq in seqs:
            tl = self._forget(seq.seq_id)
            self._release_held(seq.seq_id)  # its prefix is cached now: the samples go
            parent_done = self._child_done(tl)
            if tl.aborted:
                continue
            # Drop finished state: a whole-trace replay holds ~10^8 tokens otherwise.
            record = _record(seq, tl, self._kv_bytes_per_token)
            if tl.request.prefill_only:
                self.frontend_records.append(record)
                continue
            self.records.append(record)
            records.append(record)
            if parent_done:
                parents.append(tl.request.parent_id or tl.request.request_id)
        return records, parents

    def _child_done(self, tl: _Timeline) -> bool:
        """Count a child out of its parent; True when it was the parent's last."""
        return self._count_out(tl.request)

    def _count_out(self, req: GenerationRequest) -> bool:
        """A sample left (finished or aborted); a front stage's prefill-only child is no sample."""
        if req.prefill_only:
            return False
        parent = req.parent_id or req.request_id
        left = self._children_left.get(parent, 1) - 1
        if left > 0:
            self._children_left[parent] = left
            return False
        self._children_left.pop(parent, None)
        return True

    def _forget(self, request_id: str) -> _Timeline:
        self._unscheduled.discard(request_id)
        self._resampled.discard(request_id)
        return self._timelines.pop(request_id)


def _sequence(req: GenerationRequest, arrival_s: float) -> Sequence:
    return Sequence(
        seq_id=req.request_id,
        token_ids=_token_ids(req.prompt_ids),
        num_prompt_tokens=len(req.prompt_ids),
        max_new_tokens=req.max_new_tokens,
        salt=req.salt,
        lora_id=req.lora_id,
        priority=req.priority,
        arrival_s=arrival_s,
        scripted_output_ids=req.scripted_output_ids,
    )


def _token_ids(prompt_ids: Ids[int]) -> list[int] | array[int]:
    """The sequence's own growable copy of the prompt: a compact prompt (array('i'), whole-trace
    replays) stays one, a memcpy instead of ~12k int objects per request (caches read both)."""
    if isinstance(prompt_ids, array):
        return array(prompt_ids.typecode, prompt_ids)
    return list(prompt_ids)


def _record(seq: Sequence, tl: _Timeline, kv_bytes_per_token: float) -> RequestRecord:
    req, times = tl.request, tl.token_times_s
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
        host_cached_tokens=seq.num_host_cached_tokens,
        host_load_bytes=seq.host_load_bytes,
        host_store_bytes=int(seq.num_host_stored_tokens * kv_bytes_per_token),
        host_load_s=seq.host_load_s,
        storage_cached_tokens=seq.num_storage_cached_tokens,
    )
