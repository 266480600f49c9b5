"""The contract between the scheduler and a prefix cache, written once for every implementation.

A cache design is two objects that share state:

* `PrefixCache` owns the KV block/slot allocator and the reuse structure (hash map or radix tree).
  It answers "how much of this sequence is cached", "where does its KV live", and keeps stats.
* `Admission` is the upstream scheduler contract that drives that cache (vLLM's `allocate_slots`
  loop with preemption, docs/apc.md §5; SGLang's `PrefillAdder` budget with retraction,
  docs/radix.md §7-8). Each design ships its own because the two upstreams admit, evict and
  preempt differently, and fidelity is the product.

The generic `engines.scheduler.Scheduler` owns arrivals, the waiting/running lists, the forward
pass and token bookkeeping; it calls only `Admission.schedule` and `Admission.finish_step`, and
reads `PrefixCache.block_table` to address the KV pool. Nothing else calls the cache.

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


@runtime_checkable
class PrefixCache(Protocol):
    """What every cache provides, beyond its upstream-faithful native API."""

    name: str
    enabled: bool
    block_size: int  # tokens per KV block that block_table() indexes (APC B, radix page size)
    num_blocks: int  # pool blocks including the reserved block 0

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

    def block_table(self, seq: Sequence) -> list[int]:
        """Block ids covering the tokens of `seq` that have KV allocated, in order."""
        ...

    def release(self, seq: Sequence, *, finished: bool) -> None:
        """Drop every hold `seq` has. finished=True is a normal finish (radix inserts the output
        first); False is preemption, retraction or abort (nothing new becomes cached in radix;
        APC frees the same way in both cases). Releasing an unknown sequence is a no-op."""
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


class Admission(Protocol):
    """An upstream scheduler contract over one cache (see module docstring).

    `schedule` may reorder `waiting` (policy), move sequences between `waiting` and `running`,
    preempt (status PREEMPTED, num_computed_tokens reset to 0, KV released, put back in `waiting`
    where upstream puts it), and allocate KV for everything it schedules. It sets
    `seq.num_computed_tokens` to the adopted prefix on admission and `seq.num_cached_tokens` on the
    first admission. It never runs the model.

    After the executor ran the plan, the scheduler advances `num_computed_tokens` to each
    `ScheduledSeq.end`, appends any sampled token, marks finished sequences FINISHED and removes
    them from `running`, then calls `finish_step(plan, finished)`: make computed tokens matchable
    the upstream way (APC async-decode caching, radix checkpoint) and release finished sequences.
    """

    cache: PrefixCache

    def schedule(
        self, waiting: deque[Sequence], running: list[Sequence], budget: StepBudget
    ) -> StepPlan: ...

    def finish_step(self, plan: StepPlan, finished: list[Sequence]) -> None: ...


# name -> factory(EngineConfig) -> (PrefixCache, Admission). Implementations register on import.
CACHES: Registry[Callable[[Any], tuple[PrefixCache, Admission]]] = Registry("cache")


def build_cache(config: Any) -> tuple[PrefixCache, Admission]:
    """Build the cache and its admission for an `engines.config.EngineConfig`."""
    return CACHES.get(config.cache)(config)
