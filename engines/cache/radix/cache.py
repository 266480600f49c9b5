"""`RadixCache`: the `PrefixCache` face of the unified radix tree (docs/radix.md §5, §12).

It owns the tree, the slot allocator (page 1) or page allocator (page P), the `req_to_token` rows
and each running request's `ReqKV`. KV addressing: block id = slot id (page 1, block_size 1) or
page id (page P), so `block_table(seq)` is the request's row read one entry per page.

Usage accounting (§5.5, in tokens):

    available  the allocator's free slots
    evictable  the tree's unlocked tokens
    protected  the tree's locked tokens + request-private slots (rows beyond cache_protected_len,
               whole pages with P > 1)
    available + evictable + protected == capacity, else something leaked or was freed twice.

Content becomes matchable only when inserted: `commit` is upstream's `cache_unfinished_req`
(checkpoint an unfinished request), `release(finished=True)` its `cache_finished_req`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np

from engines.cache.addressing import TableJournal
from engines.cache.protocol import (
    BudgetedAllocation,
    DecodeRunAllocation,
    GroupRelease,
    PrefixCache,
    PrefixOrder,
    PrefixPeek,
    RecencyRefresh,
)
from engines.cache.radix.allocator import (
    PagedTokenToKVPoolAllocator,
    ReqToTokenPool,
    TokenToKVPoolAllocator,
)
from engines.cache.radix.eviction import make_eviction_policy
from engines.cache.radix.hooks import (
    ReqKV,
    checkpoint,
    decode_run_pages,
    evict_to_free_tokens,
    match_request,
    prepare_decode,
    prepare_decode_run,
    prepare_extend,
    release_kv_cache,
    request_key,
    start_request,
)
from engines.cache.radix.node import TreeNode
from engines.cache.radix.peek import peek_prefix
from engines.cache.radix.recency import PROCESS_CLOCK, LogicalClock
from engines.cache.radix.schedule_policy import SortPassMatch, dfs_weight_order
from engines.cache.radix.tree import TreeLock, UnifiedRadixTree
from engines.cache.records import (
    Allocation,
    CacheIntegrityError,
    CacheStats,
    CacheUsage,
    PrefixMatch,
)
from engines.sequence import Sequence

# Radix's handle types: a match carries its last matched node, a lock is the tree's receipt.
RadixAllocation = Allocation[TreeNode, TreeLock]


class RadixCache(
    PrefixCache[TreeNode, TreeLock],
    BudgetedAllocation,
    DecodeRunAllocation,
    GroupRelease,
    PrefixOrder,
    PrefixPeek,
    RecencyRefresh,
):
    """The radix tree behind the cache protocols; no `KvEventSource`: SGLang publishes no KV
    events in vLLM's terms."""

    name = "radix"
    matchable_at_allocation = False

    def __init__(
        self,
        page_size: int = 1,
        capacity_tokens: int = 65536,
        *,
        enabled: bool = True,
        eviction_policy: str = "lru",
        eviction_params: dict[str, Any] | None = None,
        max_num_reqs: int = 256,
        clock: LogicalClock = PROCESS_CLOCK,
    ) -> None:
        if capacity_tokens % page_size:
            raise ValueError(
                f"capacity {capacity_tokens} is not a multiple of page size {page_size}"
            )
        self.enabled = enabled
        self.page_size = self.block_size = page_size
        self.num_blocks = capacity_tokens // page_size + 1
        self.eviction_policy = eviction_policy
        self.allocator = (
            TokenToKVPoolAllocator(capacity_tokens)
            if page_size == 1
            else PagedTokenToKVPoolAllocator(capacity_tokens, page_size)
        )
        policy = make_eviction_policy(eviction_policy, **(eviction_params or {}))
        self.tree = UnifiedRadixTree(page_size, self.allocator, policy, clock, disable=not enabled)
        self.req_to_token_pool = ReqToTokenPool(max_num_reqs)
        self.reqs: dict[str, ReqKV] = {}
        self._stats = CacheStats()
        self.table_journal = TableJournal()  # addressing: what changed since the executor looked

    @property
    def capacity_tokens(self) -> int:
        return (self.num_blocks - 1) * self.block_size

    # --------------------------------------------------------------- protocol
    def match(self, seq: Sequence, *, capped: bool = True) -> PrefixMatch[TreeNode]:
        result = match_request(self.tree, seq, capped)
        return PrefixMatch(result.device_prefix_len, result.last_device_node)

    def lock(self, match: PrefixMatch[TreeNode]) -> TreeLock:
        return self.tree.lock(match.handle)

    def unlock(self, lock: TreeLock) -> None:
        self.tree.unlock(lock)

    def free_tokens(self) -> int:
        return self.allocator.available_size() + self.tree.evictable_size()

    def available_tokens(self) -> int:
        return self.allocator.available_size()

    def evict(self, num_tokens: int) -> None:
        evict_to_free_tokens(self, num_tokens)

    def allocate(self, items: list[RadixAllocation]) -> bool:
        """A prefill batch (`allocate_budgeted`), a single item checked against `free_tokens()`
        first and refused whole."""
        if len(items) == 1 and not self._fits(items[0]):
            return False
        return self.allocate_budgeted(items)

    def allocate_decode(self, items: list[RadixAllocation]) -> bool:
        """One slot (or page) per running request (`prepare_decode`); the caller has budgeted."""
        states = [self.reqs[item.seq.seq_id] for item in items]
        if self.page_size == 1:  # one new block per request: journaled in one piece
            seq_ids = [item.seq.seq_id for item in items]
            positions = np.fromiter((st.kv_allocated_len for st in states), np.int64, len(states))
            slots = prepare_decode(self, states)
            self.table_journal.append(seq_ids, positions, np.asarray(slots))
            return True
        grown = [(item.seq.seq_id, st.kv_allocated_len, st) for item, st in zip(items, states)]
        prepare_decode(self, states)
        self._journal_rows(grown)
        return True

    def allocate_budgeted(self, items: list[RadixAllocation]) -> bool:
        """A prefill batch (`prepare_extend`) the caller has budgeted: new requests take a row and
        adopt their matched, locked prefix."""
        batch = []
        for item in items:
            seq = item.seq
            st = self.reqs.get(seq.seq_id)
            if st is None:
                match = item.adopt if item.adopt is not None else self.match(seq, capped=True)
                node = match.handle
                lock = item.lock if item.lock is not None else self.tree.lock(node)
                st = start_request(self, seq, match.num_tokens, node, lock)
                batch.append((seq, st, match.num_tokens, item.num_new_tokens))
            else:
                batch.append((seq, st, st.kv_allocated_len, item.num_new_tokens))
        grown = [(seq.seq_id, st.kv_allocated_len, st) for seq, st, _, _ in batch]
        prepare_extend(self, batch)
        self._journal_rows(grown)
        return True

    def _journal_rows(self, rows: list[tuple[str, int, ReqKV]]) -> None:
        """Journal each (seq_id, row length before a write, state) whose table gained pages:
        slots added inside a page already in the table change no block id."""
        p = self.page_size
        for seq_id, length, st in rows:
            first = -(-length // p)  # the first page the table did not have
            if st.kv_allocated_len > first * p:
                self.table_journal.write(seq_id, first)

    def _fits(self, item: RadixAllocation) -> bool:
        """Would one request's allocation fit after evicting every unlocked leaf? Its own matched
        prefix counts as locked (it is locked once admitted)."""
        st = self.reqs.get(item.seq.seq_id)
        p = self.page_size
        held = st.kv_allocated_len if st is not None else 0
        adopted = item.adopt.num_tokens if st is None and item.adopt is not None else 0
        need = -(-item.num_new_tokens // p) * p + (p if p > 1 else 0)
        if item.whole_sequence_must_fit:
            need = max(need, -(-(item.seq.num_tokens - held - adopted) // p) * p)
        temp = self.tree.lock(item.adopt.handle) if item.adopt and adopted else None
        try:
            return self.free_tokens() >= need
        finally:
            if temp is not None:
                self.tree.unlock(temp)

    def decode_run_tokens(self, seqs: list[Sequence], num_steps: int) -> int:
        states = [self.reqs[seq.seq_id] for seq in seqs]
        return decode_run_pages(self, states, num_steps) * self.page_size

    def allocate_decode_run(
        self, items: list[RadixAllocation], num_steps: int, matchable_lag: int
    ) -> None:
        """`prepare_decode` run `num_steps` times (decode allocates slots only: nothing becomes
        matchable before a commit, so the limits and the lag change nothing)."""
        states = [self.reqs[item.seq.seq_id] for item in items]
        grown = [(item.seq.seq_id, st.kv_allocated_len, st) for item, st in zip(items, states)]
        prepare_decode_run(self, states, num_steps)
        self._journal_rows(grown)

    def commit(self, seq: Sequence, num_tokens: int) -> None:
        """`cache_unfinished_req`: insert the first `num_tokens` (page-aligned), rewrite the
        request's row with the tree's slots and move its lock to the new last node."""
        st = self.reqs[seq.seq_id]
        protected = st.cache_protected_len  # the row is rewritten from here (tree slots)
        checkpoint(self, st, seq, num_tokens)
        st.prefix_len = num_tokens
        if st.cache_protected_len > protected:  # protected is page-aligned
            self._journal_rows([(seq.seq_id, protected, st)])

    def cached_prefix_tokens(self, seq: Sequence) -> int:
        """The tree's match walked read only (peek.py): no split, no recency stamp."""
        return peek_prefix(self.tree, seq)

    def touch(self, seq: Sequence) -> None:
        """Re-stamp the cached prefix of `seq` (only LRU reads the stamps it refreshes)."""
        if self.eviction_policy == "lru" and not self.tree.disable:
            self.tree.touch_prefix(request_key(seq))

    def dfs_weight_order(
        self, queue: list[Sequence], matches: dict[str, PrefixMatch[TreeNode]]
    ) -> list[Sequence]:
        found = {sid: SortPassMatch(m.num_tokens, m.handle) for sid, m in matches.items()}
        return dfs_weight_order(queue, found, set(), self.tree.root_node)

    def record_admission(
        self, num_cached: int, num_new: int, *, new_request: bool, retried: bool
    ) -> None:
        self._stats.record(num_cached, num_new, new_request=new_request, retried=retried)

    def release_batch(self, seqs: list[Sequence], *, finished: bool) -> None:
        """One allocator free group (upstream releases a decode batch's finished requests so)."""
        self.allocator.free_group_begin()
        for seq in seqs:
            self.release(seq, finished=finished)
        self.allocator.free_group_end()

    def block_table(self, seq: Sequence) -> list[int]:
        st = self.reqs.get(seq.seq_id)
        if st is None:
            return []
        row = self.req_to_token_pool.row(st.row)[: st.kv_allocated_len]
        p = self.page_size
        table: list[int] = row.tolist() if p == 1 else (row[::p] // p).tolist()
        return table

    def block_ids_from(self, seq_id: str, start: int) -> np.ndarray:
        st = self.reqs[seq_id]
        p = self.page_size
        row = self.req_to_token_pool.row(st.row)[start * p : st.kv_allocated_len]
        return row if p == 1 else row[::p] // p

    def release(self, seq: Sequence, *, finished: bool) -> None:
        st = self.reqs.pop(seq.seq_id, None)
        if st is not None:
            self.table_journal.release(seq.seq_id)
            release_kv_cache(self, st, seq, do_checkpoint=finished)

    def stats(self) -> CacheStats:
        return replace(
            self._stats,
            num_evictions=self.tree.num_evicted_nodes,
            evicted_tokens=self.tree.num_evicted_tokens,
        )

    def private_tokens(self) -> int:
        """Slots held by running requests outside the tree (whole pages with P > 1)."""
        p = self.page_size
        return sum(
            -(-(st.kv_allocated_len - st.cache_protected_len) // p) * p for st in self.reqs.values()
        )

    def usage(self) -> CacheUsage:
        return CacheUsage(
            capacity=self.capacity_tokens,
            available=self.available_tokens(),
            evictable=self.tree.evictable_size(),
            protected=self.tree.protected_size() + self.private_tokens(),
        )

    def reset(self) -> bool:
        """Upstream `/flush_cache`: refused unless idle; then a fresh tree, pools and counters."""
        if self.reqs:
            return False
        self.tree.reset()
        self.tree.num_evicted_nodes = self.tree.num_evicted_tokens = 0
        self.allocator.clear()
        self.req_to_token_pool.clear()
        self._stats = CacheStats()
        return True

    # -------------------------------------------------------------- integrity
    def check_integrity(self) -> None:
        u = self.usage()
        if u.available + u.evictable + u.protected != u.capacity:
            raise CacheIntegrityError(f"available + evictable + protected != capacity: {u}")
        tree = self.tree
        total = tree.total_size()
        if tree.evictable_size() + tree.protected_size() != total:
            raise CacheIntegrityError(
                f"evictable {tree.evictable_size()} + protected {tree.protected_size()} != total {total}"
            )
        self._check_nodes()
        self._check_slots()

    def _check_nodes(self) -> None:
        """Invariants 8 (lock monotonicity), 14 (evictable-leaf set) and one lock per request."""
        tree = self.tree
        expected: Counter[TreeNode] = Counter()
        for st in self.reqs.values():
            if st.lock is not None:
                node = st.lock.node
                while node.parent is not None:
                    expected[node] += 1
                    node = node.parent
        leaves = set()
        for node in tree.nodes():
            if node.lock_ref != expected[node]:
                raise CacheIntegrityError(
                    f"{node!r}: lock_ref {node.lock_ref} != {expected[node]} request locks"
                )
            parent = node.parent
            if parent is None:
                raise CacheIntegrityError(f"{node!r}: a tree node without a parent")
            if parent.parent is not None and node.lock_ref > parent.lock_ref:
                raise CacheIntegrityError(f"lock monotonicity broken at {node!r}")
            if len(node.value) != len(node.key) or len(node.value) % self.page_size:
                raise CacheIntegrityError(
                    f"{node!r}: value/key lengths differ or are not page-aligned"
                )
            if node.lock_ref == 0 and not node.children:
                leaves.add(node)
        if leaves != tree.evictable_leaves or any(not n.in_leaf_set for n in leaves):
            raise CacheIntegrityError(
                "the evictable-leaf set differs from the unlocked childless nodes"
            )

    def _check_slots(self) -> None:
        """Free, tree-owned and request-private pages are disjoint and cover the pool (counted
        in arrays: a whole-trace pool has millions of slots)."""
        p = self.page_size
        pages = [self.allocator.free_pages()]
        pages += [node.value[::p] // p for node in self.tree.nodes()]
        for st in self.reqs.values():
            private = self.req_to_token_pool.row(st.row)[
                st.cache_protected_len : st.kv_allocated_len
            ]
            pages.append(np.unique(private // p))
        owners = np.bincount(np.concatenate(pages), minlength=self.num_blocks)
        doubles = np.flatnonzero(owners > 1)
        if doubles.size or np.count_nonzero(owners) != self.num_blocks - 1 or owners[0]:
            raise CacheIntegrityError(
                f"pages owned twice {doubles[:5].tolist()} or missing: "
                f"{np.count_nonzero(owners)} of {self.num_blocks - 1}"
            )
