"""`StorageRadixCache`: the HiCache-tiered radix cache with its storage backend (L3) behind the
host pool (SGLang 0.5.23 `--hicache-storage-backend`; `mem_cache/unified_radix_cache.py`
`write_backup_storage`, `prefetch_from_storage`, `check_prefetch_progress`;
`managers/cache_controller.py`; docs/tiers.md §10.2).

Every host write is backed up to storage; a request's prefetch (issued on arrival, for the pages
past its device + host match) brings the stored pages that continue it into the host pool, and
its admission then loads them back like any host hit (storage.py has the bookkeeping). With a
priced storage link the executor times each prefetch's read (`TimedStorageReads`) and admission
takes what the read has landed by the iteration's time (docs/tiers.md §10.2).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from engines.cache.radix.hicache import TieredRadixCache
from engines.cache.radix.storage import IN_FLIGHT, NONE, Prefetch, StoragePages, split_by_tier
from engines.cache.storage_prefetch import ReadTiming, StoragePrefetch, TimedStorageReads
from engines.cache.storage_tier import StorageTier, StorageTierConfig
from engines.cache.tiers import HostTierConfig, StorageWrite, TierStats
from engines.sequence import Sequence


class StorageRadixCache(TieredRadixCache, StorageTier, StoragePrefetch, TimedStorageReads):
    """TieredRadixCache plus HiCache's storage backup and prefetch."""

    def __init__(self, *, tier: HostTierConfig, storage: StorageTierConfig, **kw: object) -> None:
        super().__init__(tier=tier, **kw)
        self.storage = StoragePages(storage, self.page_size, self.host_pages * self.page_size)

    # ---- backup -----------------------------------------------------------------------------
    def _write(
        self, keys: list[int], parent: int | None, seq: Sequence | None, slots: list[np.ndarray]
    ) -> None:
        """A host write, then its backup: upstream backs each node up to storage once its host
        write is acknowledged (`_finish_write_through_ack` -> `write_backup_storage`), so the
        pages the write left in the pool go to storage; a write that found no room backs up
        nothing."""
        super()._write(keys, parent, seq, slots)
        held = self.pages.held
        new = self.storage.backup([k for k in keys if k in held])
        if new:
            self.log.storage_write(len(new) * self.page_size)
        if new and self.log.events is not None:  # after the host copies' own store events
            self.log.events.append(StorageWrite(tuple(new)))

    # ---- prefetch ---------------------------------------------------------------------------
    def storage_round(self, waiting: Iterable[Sequence], now_s: float | None = None) -> None:
        st = self.storage
        st.round += 1
        if now_s is not None:
            st.now_s = now_s
        for pf in st.due():
            self._land(pf, pf.keys)
        for seq_id, pf in st.to_allocate():  # timed: host room first, then the read starts
            reserved = self.pages.reserve(pf.keys)
            if st.allocate(pf, reserved):
                self.log.storage_read(seq_id, reserved * self.page_size)
            else:  # under the threshold: revoked, the request goes on without it
                self.pages.unreserve(reserved)
                st.finish(pf, 0, 0)
        for seq in waiting:
            if seq.seq_id not in st.prefetches and seq.num_computed_tokens == 0:
                self._issue(seq)

    def _land(self, pf: Prefetch, keys: list[int]) -> None:
        """`pf` ends with `keys` (a prefix of its pages) in host memory: they enter the host pool
        as one host-only run after the pages it already holds again (upstream's host insert)."""
        if pf.reserved:  # the room held back for the read takes what it landed
            self.pages.unreserve(pf.reserved)
            pf.reserved = 0
        held = self.pages.held
        already = next((i for i, k in enumerate(keys) if k not in held), len(keys))
        rest = keys[already:]
        parent = keys[already - 1] if already else pf.parent
        inserted = len(self.pages.write_fetched(rest, parent)) if rest else 0
        self.storage.finish(pf, already, inserted)

    def _issue(self, seq: Sequence) -> None:
        """The arrival's `_prefetch_kvcache`: match device then host (moving recency as
        upstream's match does), and ask storage for the pages after the match when the match
        ends at the root or on a page the host pool holds (upstream's `is_backuped` anchor)."""
        st, p = self.storage, self.page_size
        if seq.skip_cache_read or self.tree.disable:
            st.issue(seq.seq_id, 0, [], None)
            return
        limit = (seq.num_tokens - 1) // p * p
        keys = self._seq_keys(seq, limit)
        device = min(self.match(seq).num_tokens, limit) // p
        held, n = self.pages.held, device
        while n < len(keys) and keys[n] in held:
            n += 1
        if n > device:
            self.pages.split_after(keys[n - 1])
        anchored = n == 0 or keys[n - 1] in held
        span = keys[n:] if anchored else []
        pf = st.issue(seq.seq_id, n * p, span, keys[n - 1] if n else None)
        if pf.state == IN_FLIGHT and pf.keys and not st.clocked:  # read from now on
            self.log.storage_read(seq.seq_id, len(pf.keys) * p)

    def storage_ready(self, seq: Sequence) -> bool:
        """Upstream's `check_prefetch_progress`. A timed prefetch (a priced link) is terminated
        when its policy allows, taking the pages its read has landed. Otherwise a best_effort
        prefetch stopped in flight was issued this iteration (earlier ones have completed): its
        read, not yet taken by the executor, is called off with it."""
        st = self.storage
        pf = st.prefetches.get(seq.seq_id)
        if pf is not None and st.timed(pf):
            take = st.take_now(pf)
            if take is None:
                return False
            self._end_read(seq.seq_id, pf)
            self._land(pf, pf.keys[:take])
            return True
        was_in_flight = pf is not None and pf.state == IN_FLIGHT
        ready = st.ready(seq.seq_id)
        if was_in_flight and ready:
            self.log.drop_storage_reads(seq.seq_id)
        return ready

    def _end_read(self, seq_id: str, pf: Prefetch) -> None:
        """A timed prefetch stops now: a read the link has not queued yet is called off, one it
        has ends after the pages read so far (the link frees the rest of its time)."""
        if pf.timing is None:
            self.log.drop_storage_reads(seq_id)
        else:
            self.log.storage_end(seq_id, self.storage.tokens_read(pf))

    def storage_pending(self) -> bool:
        return self.storage.pending()

    def storage_due_s(self) -> float | None:
        return self.storage.due_s()

    # ---- the read's clock (TimedStorageReads) -------------------------------------------------
    def storage_reads_clocked(self) -> None:
        self.storage.clocked = True

    def storage_read_timed(self, seq_id: str, timing: ReadTiming) -> None:
        pf = self.storage.prefetches.get(seq_id)
        if pf is not None and pf.state == IN_FLIGHT:
            pf.timing = timing

    def storage_split(self, seq: Sequence, prefix: int, host: int) -> tuple[int, int]:
        """Upstream pops the loaded span at admission (`pop_prefetch_loaded_span`); a request
        retracted later and queued again issues a prefetch of its own."""
        pf = self.storage.prefetches.pop(seq.seq_id, None)
        return split_by_tier(prefix, host, pf)

    def release(self, seq: Sequence, *, finished: bool) -> None:
        if finished:
            st = self.storage
            pf = st.prefetches.pop(seq.seq_id, None)
            if pf is not None and pf.state == IN_FLIGHT:
                if st.timed(pf):  # upstream's abort terminates the read too
                    self._end_read(seq.seq_id, pf)
                self.pages.unreserve(pf.reserved)
                pf.state = NONE
                st.occupied -= pf.span
        super().release(seq, finished=finished)

    def storage_stats(self) -> TierStats:
        st = self.storage
        return TierStats(queries=st.queries, hits=st.hits, stored=st.written, loaded=st.loaded)

    def reset(self) -> bool:
        """A flush clears the host pool and what is in flight; the storage backend keeps its
        files (upstream clears storage only on its own request, `clear_hicache_storage`)."""
        if not super().reset():
            return False
        self.storage.clear()
        return True
