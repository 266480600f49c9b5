"""The scheduler contract: what a scheduler design (`vllm`, `sglang`) is, and its registry.

A `Scheduler` decides per step who runs and how many tokens, and touches a cache only through the
cache protocols (engines/cache/protocol.py). The step loop `engines.loop.StepLoop` owns the
waiting/running lists and token bookkeeping; it calls only `Scheduler.schedule` and
`Scheduler.finish_step` (and the decode-run pair), and the executor reads
`KVOwner.block_table` to address the KV pool.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from engines.cache import build_cache
from engines.cache.protocol import AnyPrefixCache
from engines.registry import Registry
from engines.sequence import Sequence

if TYPE_CHECKING:
    from engines.config import EngineConfig


@dataclass(frozen=True)
class StepBudget:
    """Per-step limits shared by both designs (matched knobs, docs/benchmarking.md §2)."""

    max_num_seqs: int
    max_num_batched_tokens: int


@dataclass(frozen=True)
class ScheduledSeq:
    """One sequence's work in a step: compute `num_new_tokens` tokens starting at `start`.

    `start` is `seq.num_computed_tokens` when the step was planned (its cached context).
    """

    seq: Sequence
    start: int
    num_new_tokens: int

    @property
    def end(self) -> int:
        return self.start + self.num_new_tokens


@dataclass
class StepPlan:
    """What the scheduler decided for one step."""

    scheduled: list[ScheduledSeq] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    # an extend batch by construction (SGLang never mixes prefill and decode): the step log calls
    # it a prefill even where a row looks like a decode (a re-prefill's one-token last chunk)
    extend: bool = False

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)


@dataclass(frozen=True)
class DecodeRun:
    """Consecutive pure-decode steps that per-step scheduling would plan identically, advanced as
    one macro-step (docs/design.md §5).

    Each of the next `max_steps` steps schedules one token of every sequence in `seqs` (plan order)
    and nothing else: nobody is admitted, chunked, preempted or retracted, nobody finishes before
    the last step (`max_steps` stops short of the first finish), and no step evicts through
    `ReuseIndex.evict`. Arrivals are the engine's to check: it ends the run at the next one.
    """

    seqs: list[Sequence]
    max_steps: int


class Scheduler(Protocol):
    """A scheduler design (engines/sched/: vLLM's, SGLang's) driving any cache through the
    PrefixCache protocol (see module docstring).

    `schedule` may reorder `waiting` (policy), move sequences between `waiting` and `running`,
    preempt (status PREEMPTED, num_computed_tokens reset to 0, KV released, put back in `waiting`
    where upstream puts it), and allocate KV for everything it schedules. It sets
    `seq.num_computed_tokens` to the adopted prefix on admission and `seq.num_cached_tokens` on the
    first admission. It never runs the model.

    After the executor ran the plan, the step loop advances `num_computed_tokens` to each
    `ScheduledSeq.end`, appends any sampled token, marks finished sequences FINISHED and removes
    them from `running`, then calls `finish_step(plan, finished)`: commit computed tokens where the
    design and the cache need it (vLLM's async catch-up, SGLang's checkpoint of unfinished
    requests) and release finished sequences.
    """

    cache: AnyPrefixCache
    # SGLang's overlap loop: the next batch is formed while the last one runs, so requests that
    # arrive during a step reach the formation after the next (engines/loop.py `schedule`)
    overlap: bool

    def schedule(
        self,
        waiting: deque[Sequence],
        running: list[Sequence],
        budget: StepBudget,
        *,
        now_s: float | None = None,
    ) -> StepPlan:
        """The next step's plan; `now_s`: the iteration's time on the run clock (None: not
        known), for what upstream decides against time (SGLang's storage prefetch)."""
        ...

    def finish_step(self, plan: StepPlan, finished: list[Sequence]) -> None: ...

    def plan_decode_run(
        self, waiting: deque[Sequence], running: list[Sequence], budget: StepBudget
    ) -> DecodeRun | None:
        """The decode run the next steps would be, or None (the next step needs `schedule`).
        Changes nothing."""
        ...

    def apply_decode_run(self, run: DecodeRun, num_steps: int) -> None:
        """Everything the first `num_steps` steps of `run` would have done in `schedule` and
        `finish_step` (allocations through `DecodeRunAllocation.allocate_decode_run`, the design's own
        step state), given sequences in the state `allocate_decode_run` documents."""
        ...

    def on_idle(self) -> None:
        """The engine's iteration found nothing waiting or running (SGLang resets its
        `new_token_ratio`; vLLM keeps no such state)."""
        ...


@runtime_checkable
class PendingTransfers(Protocol):
    """Capability of a scheduler whose steps can schedule nothing while KV transfers it waits for
    are in flight (vLLM's asynchronous host loads): such a step is progress, not a stuck engine."""

    def transfers_pending(self) -> bool: ...

    def transfers_due_s(self) -> float | None:
        """When a transfer waited for on the run clock next lets a request in (a priced storage
        read), after the current iteration; None: the next iteration decides, with no time owed."""
        ...


# name -> factory(PrefixCache, EngineConfig) -> Scheduler; filled in engines/sched/__init__.py.
SCHEDULERS: Registry[Callable[[AnyPrefixCache, EngineConfig], Scheduler]] = Registry("scheduler")


def build_scheduler(config: EngineConfig) -> Scheduler:
    """The scheduler design `config.scheduler_design` driving a new cache of design `config.cache`
    (the cache is the scheduler's `.cache`)."""
    return SCHEDULERS.get(config.scheduler_design)(build_cache(config), config)
