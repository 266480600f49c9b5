"""`TieredApcCache`: APC with vLLM's CPU offloading tier, the scheduler side of vLLM 0.33's
OffloadingConnector (`vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py` and
`.../offloading/scheduler.py`; docs/tiers.md §2).

The device cache is `ApcCache` unchanged. The tier adds: a lookup past the device hit in whole
chunks (the incomplete last chunk is never stored, so never hit), a load of the hit into uncached
blocks that runs between steps (the request waits for it; `AsyncHostLoad`), and stores built when
a step is planned for the chunks that step completes (prompt chunks only by default), written one
step later and readable only after the step that writes them. `StorageTieredApcCache` puts vLLM's
file-system tier behind the CPU tier (storage_store.py; docs/tiers.md §10.1).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

import numpy as np

from engines.cache.apc.cache import ApcCache
from engines.cache.apc.host_store import HostChunkStore
from engines.cache.apc.offload_policy import Key
from engines.cache.apc.storage_store import StorageChunkStore
from engines.cache.records import PrefixMatch
from engines.cache.storage_tier import StorageTier
from engines.cache.tiers import (
    LOAD_BEFORE_STEP,
    AsyncHostLoad,
    HostEvent,
    HostEvict,
    HostLoad,
    HostReset,
    HostStore,
    HostTier,
    HostTierConfig,
    StorageRead,
    StorageWrite,
    TierStats,
    TransferLog,
    Transfers,
    held_past_device,
    token_slots,
)
from engines.sequence import Sequence


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Job(NamedTuple):
    """One transfer for a request: a store of its new chunks or a load of its host hit."""

    keys: list[Key]
    seq_id: str
    is_load: bool = False


class TieredApcCache(ApcCache, HostTier, AsyncHostLoad):
    """ApcCache plus a host chunk store driven by the connector's scheduler-side rules."""

    host_load_overlap = LOAD_BEFORE_STEP  # the request waits for its load (docs/tiers.md §7)

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        tier: HostTierConfig,
        storage: bool = False,
        **kw: object,
    ):
        super().__init__(num_blocks, block_size, **kw)  # type: ignore[arg-type]
        self.blocks_per_chunk = tier.blocks_per_chunk
        self.chunk_tokens = block_size * tier.blocks_per_chunk
        self.offload_prompt_only = tier.offload_prompt_only
        self.store = HostChunkStore(
            tier.tokens // self.chunk_tokens, tier.policy, tier.store_threshold
        )
        self.next_chunk: dict[str, int] = {}  # upstream next_stored_chunk_idx per request
        # Transfers by the step that planned them: the worker starts a step's loads in that
        # step and its stores at the start of the next (offloading/worker.py), and each is done
        # when the output of the step that ran it is processed, after the next step is planned.
        self.jobs_planned: list[Job] = []  # the plan being made
        self.jobs_last_step: list[Job] = []  # the step before it
        self.stores_deferred: list[Job] = []  # stores the worker ran with the last step
        self.jobs_of: Counter[str] = Counter()  # transfers not done, per request
        # finished requests with their chunk keys, blocks held and block table (copy events
        # only): their last stores go with the next plan (taken before release drops them)
        self.finished_last_step: list[tuple[Sequence, list[Key], int, list[int]]] = []
        self.queries = self.hits = self.stored_chunks = 0
        self.log = TransferLog()
        # vLLM's file-system secondary tier behind the CPU tier (None: the CPU tier alone)
        self.storage = StorageChunkStore() if storage else None
        self.storage_queries = self.storage_hits = 0
        self.storage_of: dict[str, int] = {}  # per request: tokens of its load from storage
        self.finishing: set[str] = set()  # finished, stores in flight: not finalized yet
        self.offered = False  # this plan offered a CPU store (the manager's poll of the step)

    # ---- lookup and load ------------------------------------------------------------------
    def chunk_keys(self, seq: Sequence) -> list[Key]:
        """One key per complete chunk: the hash of the chunk's last block (it chains the whole
        prefix)."""
        keys = self.manager.block_keys(seq)
        bpc = self.blocks_per_chunk
        return keys[bpc - 1 :: bpc]

    def host_lookup(self, seq: Sequence, device_tokens: int) -> int | None:
        if seq.skip_cache_read:
            return 0
        if self.jobs_of[seq.seq_id]:
            return None  # a preempted request whose stores are still in flight waits for them
        unit = self.chunk_tokens
        keys = self.chunk_keys(seq)
        limit = min(seq.num_tokens, len(keys) * unit)
        if limit - device_tokens < unit:
            return 0
        start = device_tokens // unit  # a device hit inside a chunk: that chunk is looked up
        window = keys[start : cdiv(limit, unit)]
        if self.storage is None:
            hits = self.store.lookup(window)
        else:  # past the CPU tier into storage (side effects: asks, promotions)
            promoting = len(self.storage.promoting)
            hits = self.storage.lookup(seq.seq_id, window, self.store)
            if len(self.storage.promoting) > promoting:  # read for this request's coming load
                promoted = self.storage.promoting[promoting:]
                self.log.storage_read(seq.seq_id, len(promoted) * unit)
                if self.log.events is not None:
                    self._promotion_events(promoted)
        if hits is None:
            return None
        host = min(limit, unit * (start + hits)) - device_tokens
        if host < unit:
            return 0
        if self.store.being_loaded(keys[start : cdiv(device_tokens + host, unit)]):
            return None  # a load in flight reads these chunks: the request waits for it
        return host

    def _promotion_events(self, keys: list[Key]) -> None:
        """Copies for a real executor: the CPU chunks the promotions evicted, then the reads."""
        events = self.log.events
        assert events is not None
        if self.store.evicted_keys:
            events.append(HostEvict(tuple(self.store.evicted_keys)))
            self.store.evicted_keys = []
        events.append(StorageRead(tuple(keys)))

    def held_prefix_tokens(self, seq: Sequence) -> int:
        """The device's cached prefix, then the host's ready chunks from the chunk it ends in
        (HostPrefixPeek): read only, no memo left, no policy touched."""
        bpc = self.blocks_per_chunk
        keys = self.manager.peek_keys(seq)[bpc - 1 :: bpc]  # chunk_keys, leaving no memo
        device = self.cached_prefix_tokens(seq)
        return held_past_device(device, self.chunk_tokens, keys, self.store.ready)

    def host_load(self, seq: Sequence, device_tokens: int, host_tokens: int) -> None:
        self.queries += seq.num_tokens - device_tokens
        self.hits += host_tokens
        if host_tokens == 0:
            self._count_storage(seq, device_tokens, 0)
            return
        unit = self.chunk_tokens
        end = cdiv(device_tokens + host_tokens, unit)
        keys = self.chunk_keys(seq)[device_tokens // unit : end]
        self.store.load(seq.seq_id, keys)
        self.log.load(seq, host_tokens)
        if self.storage is not None:
            promoted = self.storage.promoted_tokens(
                seq.seq_id, keys, device_tokens, device_tokens + host_tokens, unit
            )
            self._count_storage(seq, device_tokens + host_tokens - promoted, promoted)
        if self.log.events is not None:
            slots = token_slots(
                self.block_table(seq), self.block_size, device_tokens, device_tokens + host_tokens
            )
            self.log.events.append(HostLoad(seq, tuple(keys), device_tokens % unit, slots))
        self._plan(Job(keys, seq.seq_id, is_load=True))
        self.next_chunk[seq.seq_id] = end  # loaded chunks are not offered again

    def _count_storage(self, seq: Sequence, held_above: int, promoted: int) -> None:
        """Storage's part of an admission: the tokens past the device and CPU hits were asked
        of it, `promoted` of them came from it (vLLM's DISK source)."""
        if self.storage is None:
            return
        self.storage_of[seq.seq_id] = promoted
        self.storage_queries += seq.num_tokens - held_above
        self.storage_hits += promoted

    def host_storage_tokens(self, seq: Sequence) -> int:
        """Of `seq`'s last admitted host hit, the tokens its load brought from storage."""
        return self.storage_of.get(seq.seq_id, 0)

    def host_admit(
        self,
        seq: Sequence,
        match: PrefixMatch[Any] | None,
        device_tokens: int,
        host_tokens: int,
        whole_sequence_must_fit: bool,
        in_flight: list[Sequence],
    ) -> bool:
        """vLLM admits a request with a host hit as `allocate_slots` with the external tokens, no
        new ones, caching delayed until the load is done, and the blocks the in-flight prefills
        still need reserved (`_inflight_prefill_reserved_blocks`)."""
        held = self.manager.req_to_blocks
        reserved = sum(
            max(cdiv(s.num_tokens, self.block_size) - len(held.get(s.seq_id, ())), 0)
            for s in in_flight
        )
        hits = list(match.handle) if match is not None else []
        num_held = len(self.manager.get_blocks(seq))
        blocks = self.manager.allocate_slots(
            seq,
            host_tokens,
            len(hits) * self.block_size,
            hits,
            delay_cache_blocks=True,
            full_sequence_must_fit=whole_sequence_must_fit,
            reserved_blocks=reserved,
        )
        if blocks is None:
            return False
        self.table_journal.write(seq.seq_id, num_held)
        self.host_load(seq, device_tokens, host_tokens)
        return True

    def host_load_done(self, seq: Sequence) -> bool:
        return not self.jobs_of[seq.seq_id]

    def _plan(self, job: Job) -> None:
        self.jobs_planned.append(job)
        self.jobs_of[job.seq_id] += 1

    # ---- stores -----------------------------------------------------------------------------
    def host_after_schedule(self, scheduled: list[tuple[Sequence, int]]) -> None:
        if self.storage is not None:  # on_schedule_end polls first, then the stores are offered
            self.storage.land(self.store)
            self.offered = False
        for seq, tokens_after in scheduled:
            held = len(self.manager.req_to_blocks.get(seq.seq_id, ()))
            self._offer(seq, tokens_after, self.chunk_keys(seq), held, None)
        finished, self.finished_last_step = self.finished_last_step, []
        for seq, keys, held, table in finished:  # the last sampled token's KV is never committed
            self._offer(seq, max(seq.num_prompt_tokens, seq.num_tokens - 1), keys, held, table)
        for seq, _, _, _ in finished:
            self.store.finish_request(seq.seq_id)
            self.next_chunk.pop(seq.seq_id, None)
            if self.storage is not None:
                self.finishing.add(seq.seq_id)
                self._maybe_finalize(seq.seq_id)
        if self.storage is not None:  # the connector's on_schedule_end
            self.storage.end_of_plan()

    def _maybe_finalize(self, seq_id: str) -> None:
        """A finished request with no store in flight leaves the storage tier's books (upstream
        `_maybe_finalize_request`)."""
        if self.storage is None or seq_id not in self.finishing or self.jobs_of[seq_id]:
            return
        self.finishing.discard(seq_id)
        self.storage.finish_request(seq_id)
        self.storage_of.pop(seq_id, None)

    def _offer(
        self,
        seq: Sequence,
        tokens_after: int,
        keys: list[Key],
        held: int,
        table: list[int] | None,
    ) -> None:
        """Offer `seq`'s newly complete chunks; `table`: a finished request's block table (None:
        it still holds its blocks)."""
        num = min(tokens_after, seq.num_tokens)
        if self.offload_prompt_only:
            num = min(num, seq.num_prompt_tokens)
        num_chunks = min(num // self.chunk_tokens, held // self.blocks_per_chunk, len(keys))
        start = self.next_chunk.get(seq.seq_id, 0)
        if num_chunks <= start:
            return
        self.offered = True
        stored = self.store.offer(seq.seq_id, keys[start:num_chunks])
        if stored is None:  # no room: offered again with the next step
            return
        self.next_chunk[seq.seq_id] = num_chunks
        if stored:
            self._plan(Job(stored, seq.seq_id))
            self.stored_chunks += len(stored)
            self.log.store(seq, len(stored) * self.chunk_tokens)
        if self.log.events is not None:
            self._store_events(seq, keys, start, stored, table)

    def _store_events(
        self, seq: Sequence, keys: list[Key], start: int, stored: list[Key], table: list[int] | None
    ) -> None:
        """Victims first (their host room is reused), then the stored chunks' device slots."""
        events = self.log.events
        assert events is not None
        if self.store.evicted_keys:
            events.append(HostEvict(tuple(self.store.evicted_keys)))
            self.store.evicted_keys = []
        if not stored:
            return
        index = {key: i for i, key in enumerate(keys) if i >= start}
        unit, table = self.chunk_tokens, self.block_table(seq) if table is None else table
        parts = [
            token_slots(table, self.block_size, index[k] * unit, (index[k] + 1) * unit)
            for k in stored
        ]
        computed = seq.is_finished or max(index[k] + 1 for k in stored) * unit <= (
            seq.num_computed_tokens
        )
        events.append(HostStore(tuple(stored), np.concatenate(parts), computed))

    def release(self, seq: Sequence, *, finished: bool) -> None:
        if finished:
            held = len(self.manager.req_to_blocks.get(seq.seq_id, ()))
            table = self.block_table(seq) if self.log.events is not None else []
            self.finished_last_step.append((seq, self.chunk_keys(seq), held, table))
        super().release(seq, finished=finished)

    def host_after_step(self, finished: list[Sequence]) -> None:
        """A step was planned after the last one ran: the last step's output is processed (the
        worker ran its loads and the stores planned a step before it), then the new plan's
        transfers wait for their step's output (`finished` were taken at release)."""
        for job in self.stores_deferred:
            self._complete(job)
        self.stores_deferred = []
        for job in self.jobs_last_step:
            if job.is_load:
                self._complete(job)
            else:
                self.stores_deferred.append(job)
        self.jobs_last_step, self.jobs_planned = self.jobs_planned, []
        if self.storage is not None:
            self.storage.after_step(self.store, seen_now=not self.offered)

    def _complete(self, job: Job) -> None:
        if job.is_load:
            self.store.complete_load(job.keys)
        else:
            self.store.complete(job.keys)
            if self.storage is not None:  # the cascade: every chunk stored is written down
                written = self.storage.written
                self.storage.write(job.keys, self.store)
                if self.storage.written > written:
                    self.log.storage_write((self.storage.written - written) * self.chunk_tokens)
                if self.log.events is not None:
                    self.log.events.append(StorageWrite(tuple(job.keys)))
        self.jobs_of[job.seq_id] -= 1
        if not self.jobs_of[job.seq_id]:
            del self.jobs_of[job.seq_id]
            self._maybe_finalize(job.seq_id)

    def host_idle(self) -> None:
        if self.finished_last_step:
            self.host_after_schedule([])
        if self.storage is not None:
            self.storage.end_of_plan()
        for job in (*self.stores_deferred, *self.jobs_last_step, *self.jobs_planned):
            self._complete(job)
        self.stores_deferred, self.jobs_last_step, self.jobs_planned = [], [], []
        if self.storage is not None:
            self.storage.after_step(self.store, seen_now=True)

    def host_busy(self) -> bool:
        """A storage ask or promotion in flight (the next step advances it)."""
        return self.storage is not None and self.storage.busy()

    def host_stats(self) -> TierStats:
        unit = self.chunk_tokens
        return TierStats(
            queries=self.queries,
            hits=self.hits,
            stored=self.stored_chunks * unit,
            loaded=self.hits,
            evicted=self.store.num_evicted * unit,
        )

    def host_take_transfers(self) -> Transfers:
        return self.log.take()

    def host_keep_events(self) -> tuple[int, int]:
        self.log.events = []
        return self.store.num_chunks, self.chunk_tokens

    def host_take_events(self) -> list[HostEvent]:
        return self.log.take_events()

    def reset(self) -> bool:
        """A prefix-cache reset clears the host tier too (the connector's reset_cache)."""
        if not super().reset():
            return False
        self.store.reset()
        self.next_chunk.clear()
        self.jobs_planned, self.stores_deferred, self.finished_last_step = [], [], []
        self.jobs_last_step = []
        self.jobs_of.clear()
        self.queries = self.hits = self.stored_chunks = 0
        self.store.num_evicted = 0
        if self.storage is not None:  # the files stay (secondary tiers are not reset)
            self.storage.reset()
            self.storage_queries = self.storage_hits = 0
            self.storage_of.clear()
        self.store.evicted_keys = []
        if self.log.events is not None:
            self.log.events.append(HostReset())
        return True


class StorageTieredApcCache(TieredApcCache, StorageTier):
    """TieredApcCache with vLLM's file-system tier behind its CPU tier (TieringOffloadingManager
    with one `fs` secondary tier; docs/tiers.md §10.1)."""

    def __init__(self, num_blocks: int, block_size: int, *, tier: HostTierConfig, **kw: object):
        super().__init__(num_blocks, block_size, tier=tier, storage=True, **kw)

    def storage_stats(self) -> TierStats:
        """Tokens asked of storage past the device and CPU hits, promoted from it, written to
        it (every chunk stored to the CPU tier), read from it (promotions); never evicted."""
        assert self.storage is not None
        unit = self.chunk_tokens
        return TierStats(
            queries=self.storage_queries,
            hits=self.storage_hits,
            stored=self.storage.written * unit,
            loaded=self.storage.read * unit,
        )
