"""`TieredApcCache`: APC with vLLM's CPU offloading tier, the scheduler side of vLLM 0.33's
OffloadingConnector (`vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py` and
`.../offloading/scheduler.py`; docs/tiers.md §2).

The device cache is `ApcCache` unchanged. The tier adds: a lookup past the device hit in whole
chunks (the incomplete last chunk is never stored, so never hit), a load of the hit, and stores
built when a step is planned for the chunks that step completes (prompt chunks only by default),
written one step later and readable only after the step that writes them.
"""

from __future__ import annotations

import numpy as np

from engines.cache.apc.cache import ApcCache
from engines.cache.apc.host_store import HostChunkStore
from engines.cache.apc.offload_policy import Key
from engines.cache.tiers import (
    LOAD_BEFORE_STEP,
    HostEvent,
    HostEvict,
    HostLoad,
    HostReset,
    HostStore,
    HostTier,
    HostTierConfig,
    TierStats,
    TransferLog,
    Transfers,
    token_slots,
)
from engines.sequence import Sequence


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class TieredApcCache(ApcCache, HostTier):
    """ApcCache plus a host chunk store driven by the connector's scheduler-side rules."""

    host_load_overlap = LOAD_BEFORE_STEP  # the request waits for its load (docs/tiers.md §7)

    def __init__(self, num_blocks: int, block_size: int, *, tier: HostTierConfig, **kw: object):
        super().__init__(num_blocks, block_size, **kw)  # type: ignore[arg-type]
        self.blocks_per_chunk = tier.blocks_per_chunk
        self.chunk_tokens = block_size * tier.blocks_per_chunk
        self.offload_prompt_only = tier.offload_prompt_only
        self.store = HostChunkStore(
            tier.tokens // self.chunk_tokens, tier.policy, tier.store_threshold
        )
        self.next_chunk: dict[str, int] = {}  # upstream next_stored_chunk_idx per request
        self.jobs_planned: list[list[Key]] = []  # stores of the step being planned
        self.jobs_running: list[list[Key]] = []  # stores the worker writes during this step
        # finished requests with their chunk keys, blocks held and block table (copy events
        # only): their last stores go with the next plan (taken before release drops them)
        self.finished_last_step: list[tuple[Sequence, list[Key], int, list[int]]] = []
        self.queries = self.hits = self.stored_chunks = 0
        self.log = TransferLog()

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
        unit = self.chunk_tokens
        keys = self.chunk_keys(seq)
        limit = min(seq.num_tokens, len(keys) * unit)
        if limit - device_tokens < unit:
            return 0
        start = device_tokens // unit  # a device hit inside a chunk: that chunk is looked up
        hits = self.store.lookup(keys[start : cdiv(limit, unit)])
        if hits is None:
            return None
        host = min(limit, unit * (start + hits)) - device_tokens
        return host if host >= unit else 0

    def host_load(self, seq: Sequence, device_tokens: int, host_tokens: int) -> None:
        self.queries += seq.num_tokens - device_tokens
        self.hits += host_tokens
        if host_tokens == 0:
            return
        unit = self.chunk_tokens
        end = cdiv(device_tokens + host_tokens, unit)
        keys = self.chunk_keys(seq)[device_tokens // unit : end]
        self.store.load(seq.seq_id, keys)
        self.log.load(seq, host_tokens)
        if self.log.events is not None:
            slots = token_slots(
                self.block_table(seq), self.block_size, device_tokens, device_tokens + host_tokens
            )
            self.log.events.append(HostLoad(seq, tuple(keys), device_tokens % unit, slots))
        self.next_chunk[seq.seq_id] = end  # loaded chunks are not offered again

    # ---- stores -----------------------------------------------------------------------------
    def host_after_schedule(self, scheduled: list[tuple[Sequence, int]]) -> None:
        for seq, tokens_after in scheduled:
            held = len(self.manager.req_to_blocks.get(seq.seq_id, ()))
            self._offer(seq, tokens_after, self.chunk_keys(seq), held, None)
        finished, self.finished_last_step = self.finished_last_step, []
        for seq, keys, held, table in finished:  # the last sampled token's KV is never committed
            self._offer(seq, max(seq.num_prompt_tokens, seq.num_tokens - 1), keys, held, table)
        for seq, _, _, _ in finished:
            self.store.finish_request(seq.seq_id)
            self.next_chunk.pop(seq.seq_id, None)

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
        stored = self.store.offer(seq.seq_id, keys[start:num_chunks])
        if stored is None:  # no room: offered again with the next step
            return
        self.next_chunk[seq.seq_id] = num_chunks
        if stored:
            self.jobs_planned.append(stored)
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
        """The worker wrote the stores planned a step earlier; `finished` were taken at release."""
        for keys in self.jobs_running:
            self.store.complete(keys)
        self.jobs_running, self.jobs_planned = self.jobs_planned, []

    def host_idle(self) -> None:
        if self.finished_last_step:
            self.host_after_schedule([])
        for keys in (*self.jobs_running, *self.jobs_planned):
            self.store.complete(keys)
        self.jobs_running, self.jobs_planned = [], []

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
        self.jobs_planned, self.jobs_running, self.finished_last_step = [], [], []
        self.queries = self.hits = self.stored_chunks = 0
        self.store.num_evicted = 0
        self.store.evicted_keys = []
        if self.log.events is not None:
            self.log.events.append(HostReset())
        return True
