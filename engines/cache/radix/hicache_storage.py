"""`StorageRadixCache`: the HiCache-tiered radix cache with its storage backend (L3) behind the
host pool (SGLang 0.5.23 `--hicache-storage-backend`; `mem_cache/unified_radix_cache.py`
`write_backup_storage`, `prefetch_from_storage`, `check_prefetch_progress`;
`managers/cache_controller.py`; docs/tiers.md §10.2).

Every host write is backed up to storage; a request's prefetch (issued on arrival, for the pages
past its device + host match) brings the stored pages that continue it into the host pool, and
its admission then loads them back like any host hit (storage.py has the bookkeeping).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from engines.cache.radix.hicache import TieredRadixCache
from engines.cache.radix.storage import IN_FLIGHT, StoragePages, split_by_tier
from engines.cache.storage_prefetch import StoragePrefetch
from engines.cache.storage_tier import StorageTier, StorageTierConfig
from engines.cache.tiers import HostTierConfig, StorageWrite, TierStats
from engines.sequence import Sequence


class StorageRadixCache(TieredRadixCache, StorageTier, StoragePrefetch):
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
    def storage_round(self, waiting: Iterable[Sequence]) -> None:
        st = self.storage
        st.round += 1
        for pf in st.due():
            held = self.pages.held
            already = next((i for i, k in enumerate(pf.keys) if k not in held), len(pf.keys))
            rest = pf.keys[already:]
            parent = pf.keys[already - 1] if already else pf.parent
            st.finish(pf, already, len(self.pages.write_fetched(rest, parent)))
        for seq in waiting:
            if seq.seq_id not in st.prefetches and seq.num_computed_tokens == 0:
                self._issue(seq)

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
        if pf.state == IN_FLIGHT and pf.keys:  # the I/O thread reads the hit from now on
            self.log.storage_read(seq.seq_id, len(pf.keys) * p)

    def storage_ready(self, seq: Sequence) -> bool:
        """A best_effort prefetch stopped in flight was issued this iteration (earlier ones have
        completed): its read, not yet taken by the executor, is called off with it."""
        pf = self.storage.prefetches.get(seq.seq_id)
        was_in_flight = pf is not None and pf.state == IN_FLIGHT
        ready = self.storage.ready(seq.seq_id)
        if was_in_flight and ready:
            self.log.drop_storage_reads(seq.seq_id)
        return ready

    def storage_pending(self) -> bool:
        return self.storage.pending()

    def storage_split(self, seq: Sequence, prefix: int, host: int) -> tuple[int, int]:
        """Upstream pops the loaded span at admission (`pop_prefetch_loaded_span`); a request
        retracted later and queued again issues a prefetch of its own."""
        pf = self.storage.prefetches.pop(seq.seq_id, None)
        return split_by_tier(prefix, host, pf)

    def release(self, seq: Sequence, *, finished: bool) -> None:
        if finished:
            pf = self.storage.prefetches.pop(seq.seq_id, None)
            if pf is not None and pf.state == IN_FLIGHT:
                self.storage.occupied -= pf.span
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
