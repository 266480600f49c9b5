"""The contract between a scheduler design and a prefix cache design, written once for both.

Two independent axes meet here:

* `PrefixCache` (a cache design: `apc` hash table, `radix` tree) owns the KV block/slot allocator
  and the reuse structure. Its protocol is the set of operations that define a prefix cache:
  match a prefix (with a handle), lock/unlock it, allocate new tokens (evicting exactly the
  shortfall), commit computed tokens (make them matchable), release a request, evict, stats,
  usage and an integrity check.
* `Admission` (a scheduler design: `vllm`, `sglang`, in engines/sched/) decides per step who runs
  and how many tokens, and touches a cache only through the protocol.

Where an upstream scheduler relies on a behaviour of its own cache, the protocol names it:

* `matchable_at_allocation` (APC: vLLM's `allocate_slots` caches full blocks before the forward
  pass fills them). A cache without it (radix) makes tokens matchable only through `commit`; the
  vLLM scheduler then commits every step's computed tokens after the step, the earliest point the
  tree can hold them.
* `commit` is SGLang's `cache_unfinished_req` (checkpoint an unfinished request after a prefill or
  chunk); on APC it caches the full blocks computed so far, a no-op when they were cached at
  allocation, and vLLM's async catch-up at finish otherwise.

The step loop `engines.loop.StepLoop` owns the waiting/running lists and token bookkeeping;
it calls only `Admission.schedule` and `Admission.finish_step`, and the executor reads
`PrefixCache.block_table` to address the KV pool.

KV addressing. The pool is `[num_blocks, block_size, kv_heads, head_dim]` per layer; block 0 is
reserved (vLLM's null block, SGLang's dummy slot/page 0) and never handed out, so usable capacity is
`(num_blocks - 1) * block_size` tokens for both designs. Token `j` of a sequence lives at
`block_table(seq)[j // block_size] * block_size + j % block_size`. Radix with page 1 uses
`block_size == 1`, so its block table is SGLang's `req_to_token` row of slot ids.

Write-before-read. Blocks may become matchable before the forward pass fills them (APC caches at
allocation). The executor stores every new K/V of a step before any attention of that step reads.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from engines.registry import Registry
from engines.sequence import Sequence


class CacheIntegrityError(AssertionError):
    """The cache's accounting is inconsistent (a leak, a double free, a broken invariant)."""


@dataclass(frozen=True)
class PrefixMatch:
    """Result of a lookup: `num_tokens` reusable leading tokens plus an opaque handle.

    `num_tokens` already applies the design's granularity and the last-token rule (at most
    `num_tokens - 1` of the sequence when the lookup is capped). The handle is what admission
    adopts (APC: the hit blocks; radix: the last matched node).
    """

    num_tokens: int
    handle: Any = None


@dataclass
class CacheStats:
    """Native counters, cumulative since construction or the last `reset()`.

    APC: vLLM's PrefixCacheStats (tokens; preempted requests counted apart, docs/apc.md §10).
    Radix: SGLang's per-prefill-batch sums (docs/radix.md §10): `queries` = cached + new tokens of
    first attempts, `hits` = cached tokens of first attempts.
    """

    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0
    num_evictions: int = 0  # eviction events: APC cached blocks evicted, radix leaf nodes removed
    evicted_tokens: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0

    def record(self, num_cached: int, num_new: int, *, new_request: bool, retried: bool) -> None:
        """One admission; requests that were preempted or retracted before count apart."""
        if retried:
            self.preempted_requests += new_request
            self.preempted_queries += num_cached + num_new
            self.preempted_hits += num_cached
        else:
            self.requests += new_request
            self.queries += num_cached + num_new
            self.hits += num_cached


@dataclass(frozen=True)
class CacheUsage:
    """Occupancy in tokens. Leak checks use it (see `PrefixCache.check_integrity`).

    available: allocatable without evicting anything the design treats as cached-and-locked
      (APC: every block in the free queue, cached or not; radix: the allocator's free slots).
    evictable: cached tokens no running request holds (APC: hashed blocks in the free queue, a
      subset of `available`; radix: the tree's evictable size, disjoint from `available`).
    protected: tokens held by running requests (APC: blocks with ref_cnt > 0; radix: the tree's
      protected size plus request-private slots).
    """

    capacity: int
    available: int
    evictable: int
    protected: int


@dataclass(frozen=True)
class Allocation:
    """KV for `num_new_tokens` more tokens of `seq` (its first `seq.num_computed_tokens` have KV).

    adopt: on admission, the matched prefix the request takes over (its tokens become the head of
      the request's KV; `seq.num_computed_tokens` is still 0 then). None for a running request.
    lock: a lock the scheduler already holds on `adopt` (SGLang's adder locks while budgeting);
      the request takes it over. None: the cache locks `adopt` itself.
    whole_sequence_must_fit: refuse unless KV for every token the request has so far could be
      held (vLLM's full-prompt check at admission), even when fewer are scheduled now.
    matchable_limit: a cache that is matchable at allocation makes at most this many leading
      tokens matchable now (vLLM async scheduling: the sampled-but-unknown token); None = all.
    """

    seq: Sequence
    num_new_tokens: int
    adopt: PrefixMatch | None = None
    lock: Any = None
    whole_sequence_must_fit: bool = False
    matchable_limit: int | None = None


@runtime_checkable
class PrefixCache(Protocol):
    """The operations that define a prefix cache, beyond each design's upstream-native API."""

    name: str
    enabled: bool
    block_size: int  # tokens per KV block that block_table() indexes (APC B, radix page size)
    num_blocks: int  # pool blocks including the reserved block 0
    matchable_at_allocation: bool  # see the module docstring

    @property
    def capacity_tokens(self) -> int:
        """Usable KV tokens: (num_blocks - 1) * block_size."""
        ...

    def match(self, seq: Sequence, *, capped: bool = True) -> PrefixMatch:
        """Longest reusable cached prefix of `seq.token_ids` (prompt plus any output so far).

        capped: apply the last-token rule (reuse at most num_tokens - 1; APC block-aligned, radix
        page-aligned). Never changes ref counts, locks or stats. Radix may split nodes and refresh
        recency stamps, exactly as upstream matching does. Disabled caches return 0.
        """
        ...

    def lock(self, match: PrefixMatch) -> Any:
        """Protect a matched prefix from eviction until `unlock`; returns the lock."""
        ...

    def unlock(self, lock: Any) -> None: ...

    def free_tokens(self) -> int:
        """Tokens allocatable now, counting unlocked cached content that allocation may evict."""
        ...

    def available_tokens(self) -> int:
        """`usage().available` alone (allocatable without anything `evict` would evict), cheap
        enough to ask every step."""
        ...

    def evict(self, num_tokens: int) -> None:
        """Make `num_tokens` allocatable without evicting at allocation time; evicts exactly the
        shortfall (radix: whole leaves). A cache that evicts lazily when it allocates (APC: the
        free queue's head) does nothing."""
        ...

    def allocate(
        self, items: list[Allocation], *, decode: bool = False, budgeted: bool = False
    ) -> bool:
        """KV for every item, in order, evicting the shortfall. One item is all-or-nothing: False
        changes nothing. Several items are one batch (one eviction for the total, as SGLang's
        prepare_extend); a failure part-way raises CacheIntegrityError.
        decode=True: each item is one generated token of a running request (SGLang's decode path).
        budgeted=True: the caller has budgeted the batch (SGLang's PrefillAdder, decode memory
        check), so no fit check runs first and running out raises CacheIntegrityError.
        """
        ...

    def commit(self, seq: Sequence, num_tokens: int) -> None:
        """Make the first `num_tokens` of `seq` (computed KV) matchable, page/block-aligned."""
        ...

    def touch(self, seq: Sequence) -> None:
        """Refresh the recency of `seq`'s cached prefix without locking it (SGLang's periodic
        waiting-prefix refresh under LRU). APC has no recency outside its free queue: no-op."""
        ...

    def dfs_weight_order(
        self, queue: list[Sequence], matches: dict[str, PrefixMatch]
    ) -> list[Sequence]:
        """SGLang's dfs-weight order of `queue` over this cache's prefix structure, given each
        request's uncapped match: heavier subtrees first, post-order, unmatched requests last."""
        ...

    def record_admission(
        self, num_cached: int, num_new: int, *, new_request: bool, retried: bool
    ) -> None:
        """Count one admission in the hit statistics (`stats()`): the scheduler design decides
        when (vLLM: once per admitted request; SGLang: per prefill-batch entry)."""
        ...

    def block_table(self, seq: Sequence) -> list[int]:
        """Block ids covering the tokens of `seq` that have KV allocated, in order."""
        ...

    def decode_run_tokens(self, seqs: list[Sequence], num_steps: int) -> int:
        """KV tokens (whole blocks or pages) that `num_steps` decode steps of one token for each of
        `seqs` would newly allocate, from each sequence's current `num_computed_tokens`."""
        ...

    def allocate_decode_run(
        self, items: list[Allocation], num_steps: int, matchable_lag: int
    ) -> None:
        """Exactly what `num_steps` successive `allocate(step_items, decode=True, budgeted=True)`
        calls of one token per item would do (same blocks, same evictions, same cached keys),
        where the caller has sized the run (`decode_run_tokens`) so that no step would evict
        through `evict` or run out.

        State the caller guarantees: each `items[i].seq` has its `num_computed_tokens` of before
        the run and its `token_ids` already extended by the run's tokens (a block the run
        completes is hashed from them). `items[i].matchable_limit` caps what step 0 makes
        matchable (None: the tokens known then, num_computed_tokens + 1); step s >= 1 caps at
        num_computed_tokens + 1 + s - matchable_lag (vLLM async scheduling: lag 1).
        """
        ...

    def release(self, seq: Sequence, *, finished: bool) -> None:
        """Drop every hold `seq` has. finished=True is a normal finish (radix inserts the output
        first, SGLang's cache_finished_req); False is preemption, retraction or abort (nothing new
        becomes cached in radix; APC frees the same way in both cases, keeping the request's
        hashes). Releasing an unknown sequence is a no-op."""
        ...

    def release_batch(self, seqs: list[Sequence], *, finished: bool) -> None:
        """`release` of several requests as one free group (SGLang's decode-step release)."""
        ...

    def stats(self) -> CacheStats: ...

    def usage(self) -> CacheUsage: ...

    def check_integrity(self) -> None:
        """Raise CacheIntegrityError unless every accounting invariant of the spec holds.

        At minimum: APC free + held == usable blocks; radix available + evictable + protected ==
        capacity and evictable + protected == tree total.
        """
        ...

    def reset(self) -> bool:
        """Flush every cached entry; refuse (return False, change nothing) while a request holds
        KV. Counters restart at zero on success."""
        ...


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
    """What admission decided for one step."""

    scheduled: list[ScheduledSeq] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

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
    `PrefixCache.evict`. Arrivals are the engine's to check: it ends the run at the next one.
    """

    seqs: list[Sequence]
    max_steps: int


class Admission(Protocol):
    """A scheduler design (engines/sched/: vLLM's, SGLang's) driving any cache through the
    PrefixCache protocol (see module docstring).

    `schedule` may reorder `waiting` (policy), move sequences between `waiting` and `running`,
    preempt (status PREEMPTED, num_computed_tokens reset to 0, KV released, put back in `waiting`
    where upstream puts it), and allocate KV for everything it schedules. It sets
    `seq.num_computed_tokens` to the adopted prefix on admission and `seq.num_cached_tokens` on the
    first admission. It never runs the model.

    After the executor ran the plan, the scheduler advances `num_computed_tokens` to each
    `ScheduledSeq.end`, appends any sampled token, marks finished sequences FINISHED and removes
    them from `running`, then calls `finish_step(plan, finished)`: commit computed tokens where the
    design and the cache need it (vLLM's async catch-up, SGLang's checkpoint of unfinished
    requests) and release finished sequences.
    """

    cache: PrefixCache

    def schedule(
        self, waiting: deque[Sequence], running: list[Sequence], budget: StepBudget
    ) -> StepPlan: ...

    def finish_step(self, plan: StepPlan, finished: list[Sequence]) -> None: ...

    def plan_decode_run(
        self, waiting: deque[Sequence], running: list[Sequence], budget: StepBudget
    ) -> DecodeRun | None:
        """The decode run the next steps would be, or None (the next step needs `schedule`).
        Changes nothing."""
        ...

    def apply_decode_run(self, run: DecodeRun, num_steps: int) -> None:
        """Everything the first `num_steps` steps of `run` would have done in `schedule` and
        `finish_step` (allocations through `PrefixCache.allocate_decode_run`, the design's own
        step state), given sequences in the state `allocate_decode_run` documents."""
        ...

    def on_idle(self) -> None:
        """The engine's iteration found nothing waiting or running (SGLang resets its
        `new_token_ratio`; vLLM keeps no such state)."""
        ...


# name -> factory(EngineConfig) -> PrefixCache. Cache designs register on import.
CACHES: Registry[Callable[[Any], PrefixCache]] = Registry("cache")
# name -> factory(PrefixCache, EngineConfig) -> Admission. Scheduler designs register on import.
SCHEDULERS: Registry[Callable[[PrefixCache, Any], Admission]] = Registry("scheduler")


def build_cache(config: Any) -> tuple[PrefixCache, Admission]:
    """The cache design `config.cache` driven by the scheduler design `config.scheduler`."""
    cache = CACHES.get(config.cache)(config)
    return cache, SCHEDULERS.get(config.scheduler_design)(cache, config)
