"""The prefix cache's contract, as small protocols a scheduler design drives (engines/sched/).

A cache design (engines/cache/<name>/, registered in engines/cache/__init__.py) owns the reuse
structure and the KV blocks/slots. Its contract has two sides, as mini-sglang splits its
`BasePrefixCache` from its KV allocator:

* `ReuseIndex[H, L]`, the reuse side: mini-sglang's seven (match, lock/unlock, insert = `commit`,
  evict, reset, size = `usage`, check = `check_integrity`). `H` is the design's match handle and
  `L` its lock, both typed: a scheduler passes them back, only the cache that made one reads it.
* The addressing and allocation side: `BlockTables` (where a sequence's KV lives in the pool, what
  the executor reads) and `KVOwner[H, L]` on top of it (allocate new tokens, evicting exactly the
  shortfall; release a request; capacity and what is free).
* `CacheBookkeeping`: the design's name and its hit statistics.
* `PrefixCache[H, L]` is the three together: what every cache is and every scheduler needs.
  Schedulers hold an `AnyPrefixCache` (`PrefixCache[Any, Any]`): they never open a handle.
* Optional capabilities, each its own protocol, which a cache declares when it has them:
  `DecodeRunAllocation` (a whole decode run in one call), `PrefixOrder` (SGLang's dfs-weight
  order over the cache's prefix structure), `RecencyRefresh` (`touch`), `BudgetedAllocation`
  (allocation the caller has budgeted: SGLang's prefill adder and decode memory check),
  `GroupRelease` (several releases as one free group), `PrefixPeek` (how many
  leading tokens it holds, changing nothing: what a cache-aware router probes),
  `KvEventSource` (its changes as KV-cache events: what a server publishes and the step-locked
  twin replays on) and `UndoableCache` (undo a trial step in O(what it changed)). Code outside a
  design's package asks a capability (`isinstance(cache, PrefixPeek)`), never a design's class.

Each cache class names the protocols it implements as its bases (mypy then checks it implements
every member, with its own handle types). A disabled cache (`prefix_caching=false`) is the same
class with `enabled` False.

Where an upstream scheduler relies on a behaviour of its own cache, the protocol names it:

* `matchable_at_allocation` (APC: vLLM's `allocate_slots` caches full blocks before the forward
  pass fills them). A cache without it (radix) makes tokens matchable only through `commit`; the
  vLLM scheduler then commits every step's computed tokens after the step, the earliest point the
  tree can hold them.
* `commit` is SGLang's `cache_unfinished_req` (checkpoint an unfinished request after a prefill or
  chunk); on APC it caches the full blocks computed so far, a no-op when they were cached at
  allocation, and vLLM's async catch-up at finish otherwise.

KV addressing. The pool is `[num_blocks, block_size, kv_heads, head_dim]` per layer; block 0 is
reserved (vLLM's null block, SGLang's dummy slot/page 0) and never handed out, so usable capacity is
`(num_blocks - 1) * block_size` tokens for both designs. Token `j` of a sequence lives at
`block_table(seq)[j // block_size] * block_size + j % block_size`. Radix with page 1 uses
`block_size == 1`, so its block table is SGLang's `req_to_token` row of slot ids.

Incremental addressing. The real executor keeps every running table on its device and never
rebuilds one: a cache records in `table_journal` (engines/cache/addressing.py) the first block
index it appends or rewrites for a sequence, and each release; the executor copies only
`block_ids_from(seq_id, first)`. A table is append-only while held except where a cache rewrites
it (radix `commit` points the row at the tree's slots), and that too is journaled.

Write-before-read. Blocks may become matchable before the forward pass fills them (APC caches at
allocation). The executor stores every new K/V of a step before any attention of that step reads.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Sequence_
from typing import Any, Protocol, runtime_checkable

import numpy as np

from engines.cache.addressing import TableJournal

# H: a design's match handle (APC: the hit blocks; radix: the last matched node); L: its lock (APC:
# the referenced blocks; radix: a TreeLock)
from engines.cache.records import Allocation, CacheStats, CacheUsage, H, KvEvent, L, PrefixMatch
from engines.sequence import Sequence


@runtime_checkable
class ReuseIndex(Protocol[H, L]):
    """The reuse side: which leading tokens of a request are cached, keeping them so, and the
    structure's size and integrity (mini-sglang's match, lock, insert, evict, reset, size, check)."""

    enabled: bool
    matchable_at_allocation: bool  # see the module docstring

    def match(self, seq: Sequence, *, capped: bool = True) -> PrefixMatch[H]:
        """Longest reusable cached prefix of `seq.token_ids` (prompt plus any output so far).

        capped: apply the last-token rule (reuse at most num_tokens - 1; APC block-aligned, radix
        page-aligned). Never changes ref counts, locks or stats. Radix may split nodes and refresh
        recency stamps, exactly as upstream matching does. Disabled caches return 0.
        """
        ...

    def lock(self, match: PrefixMatch[H]) -> L:
        """Protect a matched prefix from eviction until `unlock`; returns the lock."""
        ...

    def unlock(self, lock: L) -> None: ...

    def commit(self, seq: Sequence, num_tokens: int) -> None:
        """Make the first `num_tokens` of `seq` (computed KV) matchable, page/block-aligned."""
        ...

    def evict(self, num_tokens: int) -> None:
        """Make `num_tokens` allocatable without evicting at allocation time; evicts exactly the
        shortfall (radix: whole leaves). A cache that evicts lazily when it allocates (APC: the
        free queue's head) does nothing."""
        ...

    def usage(self) -> CacheUsage:
        """Occupancy in tokens (mini-sglang's size_info): available, evictable, protected."""
        ...

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


@runtime_checkable
class BlockTables(Protocol):
    """KV addressing: what the real executor reads to find a sequence's K/V in the pool."""

    block_size: int  # tokens per KV block that block_table() indexes (APC B, radix page size)

    def block_table(self, seq: Sequence) -> list[int]:
        """Block ids covering the tokens of `seq` that have KV allocated, in order."""
        ...

    # Incremental addressing (engines/cache/addressing.py): the real executor keeps the tables
    # on its device and copies only what the journal says changed.
    table_journal: TableJournal  # where the cache records writes and releases of tables

    def block_ids_from(self, seq_id: str, start: int) -> Sequence_[int] | np.ndarray:
        """`block_table(seq)[start:]` of the running sequence `seq_id`, without building the
        whole table (an int list or int array)."""
        ...


@runtime_checkable
class KVOwner(BlockTables, Protocol[H, L]):
    """The allocation side: the KV blocks/slots, who holds which, what is left (and, through
    `BlockTables`, where they are). `allocate` adopts a match and takes over a lock of the same
    design, hence the handle types."""

    num_blocks: int  # pool blocks including the reserved block 0

    @property
    def capacity_tokens(self) -> int:
        """Usable KV tokens: (num_blocks - 1) * block_size."""
        ...

    def free_tokens(self) -> int:
        """Tokens allocatable now, counting unlocked cached content that allocation may evict."""
        ...

    def allocate(self, items: list[Allocation[H, L]]) -> bool:
        """KV for every item, in order, evicting the shortfall. One item is all-or-nothing: False
        changes nothing. Several items are one batch (one eviction for the total, as SGLang's
        prepare_extend); a failure part-way raises CacheIntegrityError. The cache checks the fit
        (a caller that budgets itself uses `BudgetedAllocation` where the cache has it)."""
        ...

    def release(self, seq: Sequence, *, finished: bool) -> None:
        """Drop every hold `seq` has. finished=True is a normal finish (radix inserts the output
        first, SGLang's cache_finished_req); False is preemption, retraction or abort (nothing new
        becomes cached in radix; APC frees the same way in both cases, keeping the request's
        hashes). Releasing an unknown sequence is a no-op."""
        ...


@runtime_checkable
class CacheBookkeeping(Protocol):
    """The design's name and its hit statistics: what the harness reads of a cache between steps."""

    name: str

    def record_admission(
        self, num_cached: int, num_new: int, *, new_request: bool, retried: bool
    ) -> None:
        """Count one admission in the hit statistics (`stats()`): the scheduler design decides
        when (vLLM: once per admitted request; SGLang: per prefill-batch entry)."""
        ...

    def stats(self) -> CacheStats: ...


@runtime_checkable
class PrefixCache(ReuseIndex[H, L], KVOwner[H, L], CacheBookkeeping, Protocol[H, L]):
    """The operations that define a prefix cache, beyond each design's upstream-native API: the
    reuse side, the addressing and allocation side, and the hit statistics together."""


# A cache of any design, as a scheduler or the engine holds it, and what it asks of one: handles
# pass through unopened.
AnyPrefixCache = PrefixCache[Any, Any]
AnyAllocation = Allocation[Any, Any]


@runtime_checkable
class DecodeRunAllocation(Protocol):
    """Capability: allocate a whole decode run (engines/sched/base.py `DecodeRun`) in one call.

    A scheduler plans decode runs only over a cache that has it."""

    def available_tokens(self) -> int:
        """`usage().available` alone (allocatable without anything `evict` would evict), cheap
        enough to ask every step: what a decode run is sized against."""
        ...

    def decode_run_tokens(self, seqs: list[Sequence], num_steps: int) -> int:
        """KV tokens (whole blocks or pages) that `num_steps` decode steps of one token for each of
        `seqs` would newly allocate, from each sequence's current `num_computed_tokens`."""
        ...

    def allocate_decode_run(
        self, items: list[Allocation[Any, Any]], num_steps: int, matchable_lag: int
    ) -> None:
        """Exactly what `num_steps` successive decode allocations of one token per item would
        do (`BudgetedAllocation.allocate_decode`, `allocate` on a cache without it: same blocks,
        same evictions, same cached keys),
        where the caller has sized the run (`decode_run_tokens`) so that no step would evict
        through `evict` or run out.

        State the caller guarantees: each `items[i].seq` has its `num_computed_tokens` of before
        the run and its `token_ids` already extended by the run's tokens (a block the run
        completes is hashed from them). `items[i].matchable_limit` caps what step 0 makes
        matchable (None: the tokens known then, num_computed_tokens + 1); step s >= 1 caps at
        num_computed_tokens + 1 + s - matchable_lag (vLLM async scheduling: lag 1).
        """
        ...


@runtime_checkable
class PrefixOrder(Protocol):
    """Capability: the `dfs-weight` waiting-queue policy's walk over the prefix structure."""

    def dfs_weight_order(
        self, queue: list[Sequence], matches: dict[str, PrefixMatch[Any]]
    ) -> list[Sequence]:
        """SGLang's dfs-weight order of `queue` over this cache's prefix structure, given each
        request's uncapped match: heavier subtrees first, post-order, unmatched requests last."""
        ...


@runtime_checkable
class RecencyRefresh(Protocol):
    """Capability: refresh recency stamps without locking (APC has no recency outside its free
    queue, so it does not have it)."""

    def touch(self, seq: Sequence) -> None:
        """Refresh the recency of `seq`'s cached prefix without locking it (SGLang's periodic
        waiting-prefix refresh under LRU)."""
        ...


@runtime_checkable
class PrefixPeek(Protocol):
    """Capability: read how much of a sequence the cache holds, changing nothing (what the fleet's
    `kv_aware` and `ideal` routers probe each replica with)."""

    def cached_prefix_tokens(self, seq: Sequence) -> int:
        """Leading tokens of `seq.token_ids` held now, with no last-token cap (what is stored),
        at the design's granularity. Changes nothing: no split, no recency stamp, no stats, no
        memo left behind."""
        ...


@runtime_checkable
class HostPrefixPeek(Protocol):
    """Capability: read how much of a sequence the device and its host tier hold together,
    changing nothing (a precise router that indexes host tiers too, as llm-d's precise scheduler
    indexes the blocks vLLM offloads to CPU, probes each replica with it)."""

    def held_prefix_tokens(self, seq: Sequence) -> int:
        """Leading tokens of `seq.token_ids` on the device (`PrefixPeek`) or, past them, ready in
        the host tier in its own unit: what a load would make cached. Changes nothing."""
        ...


@runtime_checkable
class KvEventSource(Protocol):
    """Capability: the cache's changes as KV-cache events (engines/cache/records.py `KvEvent`),
    in the order it made them. A server publishes them after each step; the step-locked twin
    pairs its steps with a server's by them."""

    def record_kv_events(self) -> None:
        """Start keeping events (off until asked: no cost to a run that does not publish)."""
        ...

    def take_kv_events(self) -> list[KvEvent]:
        """The events since the last take (none while not recording)."""
        ...

    def kv_event_hashes(
        self, token_ids: Sequence_[int], lora_id: str | None, salt: str | None
    ) -> list[int]:
        """The hashes this cache's `BlockStored` events name for the full blocks of `token_ids`
        (under a LoRA adapter and cache salt), in order; computed aside, changing nothing."""
        ...


@runtime_checkable
class BudgetedAllocation(Protocol):
    """Capability: allocation the caller has budgeted (SGLang's PrefillAdder and decode memory
    check), so no fit check runs first and running out raises CacheIntegrityError. A cache
    without it (APC: vLLM's `allocate_slots` checks the fit itself) is driven through `allocate`."""

    def allocate_budgeted(self, items: list[Allocation[Any, Any]]) -> bool:
        """`allocate` of a prefill batch, without the fit check."""
        ...

    def allocate_decode(self, items: list[Allocation[Any, Any]]) -> bool:
        """One generated token for each running request (SGLang's decode path), budgeted."""
        ...


@runtime_checkable
class GroupRelease(Protocol):
    """Capability: release several requests as one free group (SGLang's decode-step release:
    the allocator frees them together). Without it a scheduler releases them one by one."""

    def release_batch(self, seqs: list[Sequence], *, finished: bool) -> None: ...


@runtime_checkable
class UndoableCache(Protocol):
    """Capability: undo every change since a checkpoint, at the cost of what changed (a trial
    step, engines/snapshot.py; the step-locked twin tries a step before it takes one)."""

    def checkpoint(self) -> Callable[[], None]:
        """Start keeping what each change overwrites; the result puts it all back (and stops)."""
        ...
