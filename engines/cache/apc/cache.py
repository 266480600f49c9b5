"""`ApcCache`: the cache protocols (engines/cache/protocol.py) over vLLM's KVCacheManager.

The native API lives on `self.manager` (and `self.manager.block_pool`); this class adds the
design-neutral view the schedulers and harness use, and the accounting checks of invariants 29-30.
Blocks are matchable at allocation (`allocate_slots` caches them), eviction is lazy (a cached
block in the free queue is evicted when allocation takes it), and a lock is a block reference:
locking takes matched blocks out of the free queue, unlocking frees them back, tail first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from collections.abc import Sequence as Sequence_

from engines.cache.addressing import TableJournal
from engines.cache.apc.block import KVCacheBlock
from engines.cache.apc.dfs_weight import dfs_weight_order
from engines.cache.apc.kv_events import KvEventLog, hashes_by, published_hashes
from engines.cache.apc.manager import KVCacheManager
from engines.cache.protocol import (
    DecodeRunAllocation,
    KvEventSource,
    PrefixCache,
    PrefixOrder,
    PrefixPeek,
    UndoableCache,
)
from engines.cache.records import (
    Allocation,
    CacheIntegrityError,
    CacheStats,
    CacheUsage,
    KvEvent,
    PrefixMatch,
)
from engines.sequence import Sequence
from engines.snapshot import Snapshot

# APC's handle types: a match carries its hit blocks (the lookup's list), a lock the blocks it
# took a reference on.
ApcHandle = list[KVCacheBlock]
ApcLock = tuple[KVCacheBlock, ...]
ApcAllocation = Allocation[ApcHandle, ApcLock]


class ApcCache(
    PrefixCache[ApcHandle, ApcLock],
    DecodeRunAllocation,
    PrefixOrder,
    PrefixPeek,
    KvEventSource,
    UndoableCache,
):
    """vLLM's APC behind the cache protocols; no `RecencyRefresh`: vLLM has no recency outside
    the free queue; no `GroupRelease`: freeing several requests is freeing each in turn. Its KV
    events are vLLM's (kv_events.py)."""

    name = "apc"
    matchable_at_allocation = True

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        enabled: bool = True,
        hash_algo: str = "sha256",
        free_order: str = "v024",
        none_hash_seed: str | None = None,
        stats_timing: str = "admission",
        verify_tokens_on_hit: bool = False,
        head_first: bool = False,
        debug: bool = False,
    ) -> None:
        self.enabled = enabled
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.debug = debug
        self.hash_algo = hash_algo
        self.manager = KVCacheManager(
            num_blocks,
            block_size,
            enable_caching=enabled,
            hash_algo=hash_algo,
            free_order=free_order,
            none_hash_seed=none_hash_seed,
            stats_timing=stats_timing,
            verify_tokens_on_hit=verify_tokens_on_hit,
            head_first=head_first,
            track_parents=debug,
        )
        self.pool = self.manager.block_pool
        self.table_journal = TableJournal()  # addressing: what changed since the executor looked

    # ------------------------------------------------- PrefixPeek, KvEventSource
    def cached_prefix_tokens(self, seq: Sequence) -> int:
        """Cached leading blocks of all of `seq`'s tokens: the lookup touches no ref count, free
        queue or stats, and its hash memo is put back as it was."""
        return self.manager.peek(seq) * self.block_size

    def record_kv_events(self) -> None:
        """Start keeping vLLM's KV-cache events (kv_events.py); a server publishes them."""
        if self.pool.events is None:
            self.pool.events = KvEventLog()

    def take_kv_events(self) -> list[KvEvent]:
        return self.pool.events.take() if self.pool.events is not None else []

    def kv_event_hashes(
        self, token_ids: Sequence_[int], lora_id: str | None, salt: str | None
    ) -> list[int]:
        """The 64-bit hashes vLLM publishes for the full blocks (this cache's own keys, by its
        own hasher: a random NONE_HASH is the one it caches under)."""
        hasher = self.manager.hasher
        if hasher is None:  # caching off: no block is ever stored; the chain as vLLM's default
            return published_hashes(token_ids, self.block_size, self.hash_algo, lora_id, salt)
        return hashes_by(hasher, token_ids, lora_id, salt)

    def checkpoint(self) -> Callable[[], None]:
        """The manager's per-request state is saved whole (O(requests held)); the pool's changes
        are journaled as they happen (undo.py), so a pool of any size costs the same."""
        manager = self.manager
        state = Snapshot(
            [
                self,
                self.table_journal,
                manager,
                manager.prefix_cache_stats,
                manager.total_stats,
                *manager._hashes.values(),
            ]
        )
        self.pool.start_journal()

        def restore() -> None:
            self.pool.rollback_journal()
            state.restore()

        return restore

    @property
    def capacity_tokens(self) -> int:
        return (self.num_blocks - 1) * self.block_size

    def match(self, seq: Sequence, *, capped: bool = True) -> PrefixMatch[ApcHandle]:
        hits = self.manager.lookup(seq, capped=capped)
        return PrefixMatch(len(hits) * self.block_size, hits)

    def lock(self, match: PrefixMatch[ApcHandle]) -> ApcLock:
        hits = tuple(match.handle)
        self.pool.touch(hits)
        return hits

    def unlock(self, lock: ApcLock) -> None:
        self.pool.free_blocks(reversed(lock))  # tail first, as vLLM frees a table

    def free_tokens(self) -> int:
        return self.pool.get_num_free_blocks() * self.block_size

    def available_tokens(self) -> int:
        return self.pool.get_num_free_blocks() * self.block_size

    def evict(self, num_tokens: int) -> None:
        """Nothing: allocation evicts cached blocks from the free queue's head as it takes them."""

    def allocate(self, items: list[ApcAllocation]) -> bool:
        """`allocate_slots` per item: it checks the fit itself, so a caller's budget (SGLang's)
        changes nothing here and APC has no `BudgetedAllocation`."""
        for i, item in enumerate(items):
            if not self._allocate_one(item):
                if i:
                    raise CacheIntegrityError(
                        f"out of KV blocks part-way through a batch at {item.seq.seq_id}"
                    )
                return False
        return True

    def _allocate_one(self, item: ApcAllocation) -> bool:
        hits = list(item.adopt.handle) if item.adopt is not None else []
        num_held = len(self.manager.get_blocks(item.seq))
        blocks = self.manager.allocate_slots(
            item.seq,
            item.num_new_tokens,
            len(hits) * self.block_size,
            hits,
            full_sequence_must_fit=item.whole_sequence_must_fit,
            num_known_tokens=item.matchable_limit,
        )
        if item.lock is not None:  # the request's own references replace the scheduler's lock
            self.unlock(item.lock)
        if blocks is None:
            return False
        if len(blocks) == 1 and not hits:  # a decode step's new block: journaled with its id
            self.table_journal.append_one(item.seq.seq_id, num_held, blocks[0].block_id)
        elif blocks or hits:  # the table is append-only while held: only its tail is new
            self.table_journal.write(item.seq.seq_id, num_held)
        return True

    def decode_run_tokens(self, seqs: list[Sequence], num_steps: int) -> int:
        return self.manager.decode_run_blocks(seqs, num_steps) * self.block_size

    def allocate_decode_run(
        self, items: list[ApcAllocation], num_steps: int, matchable_lag: int
    ) -> None:
        """The run's `allocate_slots` calls replayed as events (KVCacheManager.allocate_decode_run)."""
        seqs = [item.seq for item in items]
        if self.manager.decode_run_blocks(seqs, num_steps) > self.pool.get_num_free_blocks():
            raise CacheIntegrityError("decode run out of KV blocks: it was sized to fit")
        limits = [item.matchable_limit for item in items]
        num_held = [len(self.manager.get_blocks(seq)) for seq in seqs]
        self.manager.allocate_decode_run(seqs, num_steps, limits, matchable_lag)
        for seq, held in zip(seqs, num_held):
            if len(self.manager.get_blocks(seq)) > held:
                self.table_journal.write(seq.seq_id, held)

    def commit(self, seq: Sequence, num_tokens: int) -> None:
        """Cache the full blocks within the first `num_tokens` (vLLM's cache_blocks); blocks
        cached at allocation are skipped, so this is the async catch-up or a no-op."""
        if self.enabled and seq.seq_id in self.manager.num_cached_block:
            self.manager.cache_blocks(seq, num_tokens)

    def dfs_weight_order(
        self, queue: list[Sequence], matches: dict[str, PrefixMatch[ApcHandle]]
    ) -> list[Sequence]:
        def hit_keys(seq: Sequence) -> list[bytes]:
            return self.manager.block_keys(seq)[: matches[seq.seq_id].num_tokens // self.block_size]

        return dfs_weight_order(queue, hit_keys)

    def record_admission(
        self, num_cached: int, num_new: int, *, new_request: bool, retried: bool
    ) -> None:
        if self.enabled:  # vLLM keeps no prefix-cache stats with caching off
            self.manager.record_tokens(num_cached + num_new, num_cached, retried, new_request)

    def block_table(self, seq: Sequence) -> list[int]:
        return self.manager.get_block_ids(seq)

    def block_ids_from(self, seq_id: str, start: int) -> list[int]:
        return [blk.block_id for blk in self.manager.req_to_blocks[seq_id][start:]]

    def release(self, seq: Sequence, *, finished: bool) -> None:
        # APC frees the same way on finish, preemption and abort (§4.3); a preempted request
        # keeps its hash memo (its tokens do not change; an in-flight token that SGLang's overlap
        # retraction drops makes `block_keys` rebuild it).
        self.table_journal.release(seq.seq_id)
        if finished:
            self.manager.forget(seq)
        else:
            self.manager.free(seq)

    def stats(self) -> CacheStats:
        st = self.manager.total_stats
        return CacheStats(
            requests=st.requests,
            queries=st.queries,
            hits=st.hits,
            preempted_requests=st.preempted_requests,
            preempted_queries=st.preempted_queries,
            preempted_hits=st.preempted_hits,
            num_evictions=self.pool.num_evictions,
            evicted_tokens=self.pool.num_evictions * self.block_size,
        )

    def usage(self) -> CacheUsage:
        bs = self.block_size
        num_free = self.pool.get_num_free_blocks()
        return CacheUsage(
            capacity=self.capacity_tokens,
            available=self.available_tokens(),
            evictable=self.pool.num_free_cached * bs,
            protected=(self.num_blocks - 1 - num_free) * bs,
        )

    def reset(self) -> bool:
        if not self.manager.reset_prefix_cache():
            return False
        self.manager.total_stats = type(self.manager.total_stats)()
        self.pool.num_evictions = 0
        return True

    # ---- integrity (invariants 29, 30) -------------------------------------------------------
    def check_integrity(self) -> None:
        pool = self.pool
        queue = pool.free_block_queue
        free_list = queue.get_all_free_blocks()
        _require(len(free_list) == queue.num_free_blocks, "queue length != num_free_blocks")
        _require(len({b.block_id for b in free_list}) == len(free_list), "block twice in queue")
        prev = queue.fake_free_list_head
        for blk in free_list:
            _require(blk.prev_free_block is prev, f"broken back link at block {blk.block_id}")
            _require(blk.ref_cnt == 0, f"free block {blk.block_id} has ref_cnt {blk.ref_cnt}")
            _require(not blk.is_null, "the null block is in the free queue")
            prev = blk
        _require(queue.fake_free_list_tail.prev_free_block is prev, "broken tail link")
        holders = Counter(
            b.block_id for table in self.manager.req_to_blocks.values() for b in table
        )
        num_held = 0
        for blk in pool.blocks[1:]:
            _require(
                blk.ref_cnt == holders[blk.block_id],
                f"block {blk.block_id}: ref_cnt {blk.ref_cnt} != {holders[blk.block_id]} tables",
            )
            num_held += blk.ref_cnt > 0
        _require(len(free_list) + num_held == self.num_blocks - 1, "free + held != usable blocks")
        _require(pool.null_block.block_hash is None and 0 not in holders, "null block in use")
        self._check_map(free_list)
        if self.debug:
            self.check_ancestor_closure()

    def _check_map(self, free_list: list[KVCacheBlock]) -> None:
        pool = self.pool
        cached = pool.cached_block_hash_to_block
        num_mapped = 0
        for key in cached:
            for blk in cached.get_all_blocks(key):
                _require(blk.block_hash == key, f"block {blk.block_id} mapped under a foreign key")
                num_mapped += 1
        hashed = [b for b in pool.blocks if b.block_hash is not None]
        _require(num_mapped == len(hashed), "hashed blocks and map entries differ")
        _require(self.enabled or not hashed, "caching is off but a block has a hash")
        num_free_hashed = sum(1 for b in free_list if b.block_hash is not None)
        _require(num_free_hashed == pool.num_free_cached, "evictable counter out of step")
        for seq_id, table in self.manager.req_to_blocks.items():
            num_cached = self.manager.num_cached_block.get(seq_id, 0)
            _require(num_cached <= len(table), f"{seq_id}: more cached blocks than its table")
            _require(
                all(b.block_hash is not None for b in table[:num_cached]) or not self.enabled,
                f"{seq_id}: a block counted as cached has no hash",
            )

    def check_ancestor_closure(self) -> None:
        """Invariant 30: a cached key's parent key is cached too (needs debug=True)."""
        parents = self.manager.parent_key
        if parents is None:
            return
        cached = self.pool.cached_block_hash_to_block
        for key in [k for k in parents if k not in cached]:
            del parents[key]
        for key in cached:
            _require(key in parents, "cached key without a recorded parent")
            parent = parents[key]
            _require(parent is None or parent in cached, "a cached block's parent was evicted")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise CacheIntegrityError(message)
