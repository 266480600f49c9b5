"""The records the cache protocols (engines/cache/protocol.py) pass and return.

A match and its handle, an allocation request, the native counters and the
occupancy, the KV-cache events a `KvEventSource` keeps, and the error an accounting check raises.
No behaviour lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from engines.sequence import Sequence

# A design's match handle and lock types (engines/cache/protocol.py `PrefixCache[H, L]`): only the
# cache that made one reads it; a scheduler passes it back unopened.
H = TypeVar("H")
L = TypeVar("L")


class CacheIntegrityError(AssertionError):
    """The cache's accounting is inconsistent (a leak, a double free, a broken invariant)."""


@dataclass(frozen=True)
class PrefixMatch(Generic[H]):
    """Result of a lookup: `num_tokens` reusable leading tokens plus the design's handle.

    `num_tokens` already applies the design's granularity and the last-token rule (at most
    `num_tokens - 1` of the sequence when the lookup is capped). The handle is what admission
    adopts (APC: the hit blocks; radix: the last matched node).
    """

    num_tokens: int
    handle: H


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
    """Occupancy in tokens. Leak checks use it (see `CacheBookkeeping.check_integrity`).

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
class Allocation(Generic[H, L]):
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
    adopt: PrefixMatch[H] | None = None
    lock: L | None = None
    whole_sequence_must_fit: bool = False
    matchable_limit: int | None = None


# KV-cache events (`KvEventSource`): the cache's changes in the terms vLLM publishes them
# (vllm/distributed/kv_events.py, 0.32-0.33). Hashes are the 64-bit integers the cache names its
# blocks by; which hash a design uses is its own (the step-locked twin compares a cache's events
# with a server's only when the two hash alike).


@dataclass(frozen=True)
class BlockStored:
    """Full blocks that became cached, in order, in one call."""

    block_hashes: tuple[int, ...]
    parent_block_hash: int | None  # the block before the first stored one (None: the first)
    token_ids: tuple[int, ...]  # every stored block's tokens, in order
    block_size: int
    lora_name: str | None = None


@dataclass(frozen=True)
class BlockRemoved:
    """Cached blocks that were evicted."""

    block_hashes: tuple[int, ...]


@dataclass(frozen=True)
class AllBlocksCleared:
    """Every cached block was dropped (a prefix-cache reset)."""


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared
