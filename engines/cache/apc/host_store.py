"""`HostChunkStore`: vLLM's CPU offloading manager (vLLM 0.33 `vllm/v1/kv_offload/cpu/manager.py`;
docs/tiers.md §2.2): a fixed number of chunk slots, each chunk keyed by the block hash of its last
device block, written (not yet readable) then ready, and a policy that picks victims.

A store offer is filtered (already held; with `store_threshold` >= 2, seen that often), evicts what
the new chunks need (never a chunk of the offer itself, never one being written or read by a load
in flight) or fails whole.
Per request it keeps the keys it saw, stored and reused, and hands them to the policy when the
request finishes.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from engines.cache.apc.offload_policy import POLICIES, Key, Policy

# Keys a request has not been seen with are tracked for store_threshold up to this many (upstream's
# max_tracker_size; the oldest untouched entry leaves first).
MAX_TRACKED = 64_000


@dataclass
class RequestAccess:
    """The chunks one request observed, in prefix order, and how (upstream `_RequestCacheAccess`)."""

    seen: list[Key] = field(default_factory=list)
    seen_set: set[Key] = field(default_factory=set)
    inserted: set[Key] = field(default_factory=set)
    reused: set[Key] = field(default_factory=set)
    store_misses: set[Key] = field(default_factory=set)

    def observe(self, keys: list[Key], reused: list[Key] | None = None) -> None:
        for key in keys:
            if key not in self.seen_set:
                self.seen_set.add(key)
                self.seen.append(key)
        # re-reading a chunk this request stored itself is no second access
        self.reused.update(k for k in reused or () if k not in self.inserted)


class HostChunkStore:
    """Host chunk slots with readiness, the store threshold and an LRU or ARC policy."""

    def __init__(self, num_chunks: int, policy: str, store_threshold: int) -> None:
        self.num_chunks = num_chunks
        self.policy: Policy = POLICIES.get(policy)(num_chunks)
        self.ready: set[Key] = set()
        self.pending: set[Key] = set()  # stored, not yet written
        self.loading: dict[Key, int] = {}  # loads in flight reading each chunk (upstream ref_cnt)
        self.pinned: set[Key] = set()  # read by a storage write not yet seen done (ref_cnt too)
        self.store_threshold = store_threshold
        self.counts: OrderedDict[Key, int] | None = OrderedDict() if store_threshold >= 2 else None
        self.requests: dict[str, RequestAccess] = {}
        self.num_evicted = 0
        self.evicted_keys: list[Key] = []  # victims since the owner last took them (copies)

    def __len__(self) -> int:
        return len(self.ready) + len(self.pending)

    def access(self, seq_id: str) -> RequestAccess:
        return self.requests.setdefault(seq_id, RequestAccess())

    def lookup(self, keys: list[Key]) -> int | None:
        """Leading keys held and ready; None when one of them is still being written."""
        hits = 0
        for key in keys:
            if key in self.ready:
                hits += 1
            elif key in self.pending:
                return None
            else:
                break
        return hits

    def load(self, seq_id: str, keys: list[Key]) -> None:
        """A load of ready chunks (upstream prepare_load): a reuse; the chunks cannot be evicted
        until `complete_load`."""
        self.access(seq_id).observe(keys, reused=keys)
        for key in keys:
            self.loading[key] = self.loading.get(key, 0) + 1

    def complete_load(self, keys: list[Key]) -> None:
        """A load finished reading its chunks (upstream complete_load)."""
        for key in keys:
            left = self.loading.pop(key) - 1
            if left:
                self.loading[key] = left

    def being_loaded(self, keys: list[Key]) -> bool:
        """Whether a load in flight reads one of `keys` (the connector then delays a request
        that would load them too)."""
        return bool(self.loading) and any(key in self.loading for key in keys)

    def offer(self, seq_id: str, keys: list[Key]) -> list[Key] | None:
        """Upstream `prepare_store`: the keys newly stored (written later, `complete`), or None
        when the chunks they need cannot be freed (nothing changes then but the counts)."""
        if self.counts is not None:
            self._count(keys)
        new = [k for k in keys if k not in self.ready and k not in self.pending]
        existing = [k for k in keys if k in self.ready]
        if self.counts is not None:
            new = [k for k in new if self.counts.get(k, 0) >= self.store_threshold]
        access = self.access(seq_id)
        misses = [k for k in new if k not in access.store_misses]
        if misses:
            self.policy.on_store_miss(misses)
            access.store_misses.update(misses)
        kept = set(new) | set(existing)
        access.observe([k for k in keys if k in kept], reused=existing)
        if not new:
            return []
        shortfall = len(new) - (self.num_chunks - len(self))
        if shortfall > 0:
            evictable = self.ready - self.loading.keys() if self.loading else self.ready
            if self.pinned:
                evictable = evictable - self.pinned
            if shortfall > len(evictable):
                return None
            victims = self.policy.evict(shortfall, evictable, set(keys))
            if victims is None:
                return None
            self.ready.difference_update(victims)
            self.num_evicted += len(victims)
            self.evicted_keys += victims
        for key in new:
            self.policy.insert(key)
            self.pending.add(key)
        access.inserted.update(new)
        return new

    def complete(self, keys: list[Key]) -> None:
        """Stores written: the chunks become readable and evictable."""
        for key in keys:
            if key in self.pending:
                self.pending.discard(key)
                self.ready.add(key)

    def finish_request(self, seq_id: str) -> None:
        """The request's accesses reach the policy (upstream on_request_finished)."""
        access = self.requests.pop(seq_id, None)
        if access is not None:
            inserted_only = access.inserted - access.reused
            self.policy.on_request_finished(access.seen, inserted_only, access.reused)

    def reset(self) -> None:
        """Drop every chunk (upstream reset_cache; the counts survive, as upstream's do)."""
        self.policy.clear()
        self.ready.clear()
        self.pending.clear()
        self.loading.clear()
        self.pinned.clear()
        self.requests.clear()

    def _count(self, keys: list[Key]) -> None:
        """One more sighting of each key; the oldest untouched key leaves a full tracker."""
        assert self.counts is not None
        counts = self.counts
        touched = {k for k in keys if k in counts}
        for key in touched:
            counts.move_to_end(key)
            counts[key] += 1
        room = len(counts) - len(touched)
        for key in keys:
            if key in counts:
                continue
            if len(counts) >= MAX_TRACKED:
                if room == 0:
                    continue
                counts.popitem(last=False)
                room -= 1
            counts[key] = 1
