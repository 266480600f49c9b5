"""vLLM V1's KVCacheManager for one full-attention group (docs/apc.md §4, §10).

Per request it keeps the append-only block table and how many leading blocks are already cached,
plus an incremental memo of the request's block keys (hashed once per block, prompt and output).
Blocks are cached when allocated, before the forward pass that fills them (§4.2 step 7).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

from engines.cache.apc.block import KVCacheBlock
from engines.cache.apc.block_pool import BlockPool
from engines.cache.apc.hashing import (
    HASH_ALGOS,
    RequestBlockHashes,
    RequestHasher,
    init_none_hash,
)
from engines.cache.apc.kv_events import BlockStored, external_hash
from engines.cache.records import CacheIntegrityError
from engines.sequence import Sequence
from engines.vllm_profile import STATS_TIMINGS

# A decode-run event: (step, position in the run, kind 0 allocate / 1 cache, limit).
RunEvent = tuple[int, int, int, int]


@dataclass
class PrefixCacheStats:
    """vLLM's per-step prefix-cache counters, in tokens; preempted requests counted apart."""

    reset: bool = False
    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0

    def record(
        self, num_tokens: int, num_hits: int, preempted: bool, new_request: bool = True
    ) -> None:
        if preempted:
            self.preempted_requests += new_request
            self.preempted_queries += num_tokens
            self.preempted_hits += num_hits
        else:
            self.requests += new_request
            self.queries += num_tokens
            self.hits += num_hits

    def add(self, other: PrefixCacheStats) -> None:
        for f in fields(self):
            if f.name != "reset":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    """Block tables, lookups, atomic allocation and freeing over one BlockPool."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        enable_caching: bool = True,
        hash_algo: str = "sha256",
        free_order: str = "v024",
        none_hash_seed: str | None = None,
        stats_timing: str = "admission",
        verify_tokens_on_hit: bool = False,
        head_first: bool = False,
        track_parents: bool = False,
    ) -> None:
        self.block_size = block_size
        self.head_first = head_first  # counterfactual free direction (engine.free_direction)
        self.enable_caching = enable_caching
        self.verify_tokens_on_hit = verify_tokens_on_hit
        self.stats_at_lookup = STATS_TIMINGS.get(stats_timing)
        self.block_pool = BlockPool(num_blocks, enable_caching, free_order)
        HASH_ALGOS.get(hash_algo)  # unknown names fail even when caching is off
        self.hasher = (
            RequestHasher(
                HASH_ALGOS.get(hash_algo).fn, init_none_hash(hash_algo, none_hash_seed), block_size
            )
            if enable_caching
            else None
        )
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        self.num_cached_block: dict[str, int] = {}
        self._hashes: dict[str, RequestBlockHashes] = {}
        self.prefix_cache_stats = PrefixCacheStats()  # this step's; see make_prefix_cache_stats
        self.total_stats = PrefixCacheStats()  # cumulative since construction or reset
        # debug only: key -> parent key, to check ancestor closure (invariant 30)
        self.parent_key: dict[bytes, bytes | None] | None = {} if track_parents else None

    # ---- hashing -----------------------------------------------------------------------------
    def block_keys(self, seq: Sequence) -> list[bytes]:
        """Map keys of every full block of `seq` (hashing only blocks not seen before)."""
        memo = self._hashes.get(seq.seq_id)
        # rebuilt when the tokens shrank too: SGLang's overlap retraction drops an in-flight token
        # (engines/sched/sglang_overlap.py `unsample`) that may have completed a hashed block
        if (
            memo is None
            or memo.owner is not seq
            or len(memo.keys) > len(seq.token_ids) // self.block_size
        ):
            memo = self._hashes[seq.seq_id] = RequestBlockHashes(seq, seq.lora_id, seq.salt)
        if self.hasher is None:
            raise CacheIntegrityError("block keys asked of a cache without prefix caching")
        return self.hasher.extend(memo, seq.token_ids)

    # ---- lookup ------------------------------------------------------------------------------
    def find_longest_cache_hit(self, seq: Sequence, max_length: int) -> list[KVCacheBlock]:
        """Leading cached blocks within `max_length` tokens; stops at the first miss (§4.1)."""
        max_blocks = max_length // self.block_size
        if max_blocks <= 0:
            return []
        keys = self.block_keys(seq)
        if not self.verify_tokens_on_hit:
            return self.block_pool.hit_run(keys, max_blocks)
        pool = self.block_pool
        hits: list[KVCacheBlock] = []
        for key in keys[:max_blocks]:
            blk = pool.get_cached_block(key)
            if blk is None or blk.provenance != self._provenance(seq, hits, len(hits)):
                break
            hits.append(blk)
        return hits

    def _provenance(self, seq: Sequence, table: list[KVCacheBlock], index: int) -> tuple[Any, ...]:
        """What a block at `index` of `seq` must have been cached with to be reusable: the same
        parent block (so the same whole prefix, by induction from block 0), the same extra keys
        (salt, LoRA) and the same tokens. A digest collision cannot pass all three."""
        bs = self.block_size
        memo = self._hashes[seq.seq_id]
        extra = memo.extra_first if index == 0 else memo.extra_rest
        parent = table[index - 1].block_id if index else None
        return (parent, extra, tuple(seq.token_ids[index * bs : (index + 1) * bs]))

    def lookup(self, seq: Sequence, *, capped: bool = True) -> list[KVCacheBlock]:
        """Side-effect-free lookup (no stats): what get_computed_blocks would return."""
        if not self.enable_caching or seq.skip_cache_read:
            return []
        return self.find_longest_cache_hit(seq, seq.num_tokens - 1 if capped else seq.num_tokens)

    def peek(self, seq: Sequence) -> int:
        """Leading cached blocks of all of `seq`'s tokens, as `lookup(capped=False)` finds them,
        leaving no trace (`traceless`)."""
        with self.traceless(seq):
            return len(self.lookup(seq, capped=False))

    def peek_keys(self, seq: Sequence) -> list[bytes]:
        """`block_keys` leaving no trace (`traceless`)."""
        with self.traceless(seq):
            return self.block_keys(seq)

    @contextlib.contextmanager
    def traceless(self, seq: Sequence) -> Iterator[None]:
        """Whatever runs inside leaves `seq.seq_id`'s hash memo as it was (or absent)."""
        before = self._hashes.get(seq.seq_id)
        try:
            yield
        finally:
            if before is None:
                self._hashes.pop(seq.seq_id, None)
            else:
                self._hashes[seq.seq_id] = before

    def get_computed_blocks(self, seq: Sequence) -> tuple[list[KVCacheBlock], int]:
        """Hit blocks and hit tokens under the last-token rule; records stats at lookup timing."""
        if not self.enable_caching or seq.skip_cache_read:
            return [], 0
        hits = self.find_longest_cache_hit(seq, seq.num_tokens - 1)
        num_hit_tokens = len(hits) * self.block_size
        if self.stats_at_lookup:
            self._record(seq, num_hit_tokens)
        return hits, num_hit_tokens

    def record_admission(self, seq: Sequence, num_hit_tokens: int) -> None:
        """Admission-timing stats (>= v0.27): once per successful admission after a lookup."""
        if self.enable_caching and not seq.skip_cache_read and not self.stats_at_lookup:
            self._record(seq, num_hit_tokens)

    def _record(self, seq: Sequence, num_hit_tokens: int) -> None:
        self.record_tokens(seq.num_tokens, num_hit_tokens, seq.num_preemptions > 0)

    def record_tokens(
        self, num_tokens: int, num_hits: int, preempted: bool, new_request: bool = True
    ) -> None:
        """Count one lookup of `num_tokens` with `num_hits` cached (a scheduler's admission)."""
        self.prefix_cache_stats.record(num_tokens, num_hits, preempted, new_request)
        self.total_stats.record(num_tokens, num_hits, preempted, new_request)

    def make_prefix_cache_stats(self) -> PrefixCacheStats:
        """Return this step's counters and start a fresh set (vLLM's per-step hand-off)."""
        stats, self.prefix_cache_stats = self.prefix_cache_stats, PrefixCacheStats()
        return stats

    # ---- allocation --------------------------------------------------------------------------
    def allocate_slots(
        self,
        seq: Sequence,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: list[KVCacheBlock] | None = None,
        num_lookahead_tokens: int = 0,
        delay_cache_blocks: bool = False,
        *,
        full_sequence_must_fit: bool = False,
        num_known_tokens: int | None = None,
        reserved_blocks: int = 0,
    ) -> list[KVCacheBlock] | None:
        """Adopt hits and allocate blocks for `num_new_tokens` more tokens, atomically: on
        failure (None) queue order and ref counts are unchanged. `num_known_tokens` caps what is
        cached (default seq.num_tokens; the async scheduler passes the count before the last
        sampled token, §5.3). `reserved_blocks` must stay free after the new blocks (vLLM gates an
        async KV load's admission with it; the full-sequence check ignores it, as upstream's)."""
        if num_new_tokens == 0 and num_new_computed_tokens == 0:
            raise ValueError("num_new_tokens must be greater than 0")
        hits = new_computed_blocks or []
        bs = self.block_size
        table = self.req_to_blocks.get(seq.seq_id)
        num_held = len(table) if table is not None else 0
        num_free = self.block_pool.get_num_free_blocks()
        num_computed = seq.num_computed_tokens + num_new_computed_tokens
        num_required = cdiv(num_computed + num_new_tokens + num_lookahead_tokens, bs)
        num_new_blocks = max(num_required - len(hits) - num_held, 0)
        num_check = num_new_blocks
        if full_sequence_must_fit:
            num_check = max(num_check, cdiv(seq.num_tokens, bs) - len(hits) - num_held)
        # Hit blocks sitting in the free queue consume free capacity when touched; count them
        # only when the bound "every hit is free" does not already fit.
        if num_check + len(hits) > num_free:
            num_free_hits = sum(1 for blk in hits if blk.ref_cnt == 0)
            if num_check + num_free_hits > num_free:
                return None
        if reserved_blocks:
            num_free_hits = sum(1 for blk in hits if blk.ref_cnt == 0)
            if num_new_blocks + num_free_hits > num_free - reserved_blocks:
                return None

        if table is None:
            table = self.req_to_blocks[seq.seq_id] = []
        if seq.seq_id not in self.num_cached_block:
            # A request being admitted: its hits become the head of the table.
            if hits:
                self.block_pool.touch(hits)
                table.extend(hits)
            self.num_cached_block[seq.seq_id] = len(hits)
        else:
            assert not hits, "a running request cannot adopt new hit blocks"
        new_blocks = self.block_pool.get_new_blocks(num_new_blocks)
        table.extend(new_blocks)
        if self.enable_caching and not delay_cache_blocks:
            known = seq.num_tokens if num_known_tokens is None else num_known_tokens
            self.cache_blocks(seq, min(num_computed + num_new_tokens, known))
        return new_blocks

    def cache_blocks(self, seq: Sequence, num_computed_tokens: int) -> None:
        """Cache every full block of the table within the first `num_computed_tokens` tokens."""
        num_full = num_computed_tokens // self.block_size
        num_cached = self.num_cached_block[seq.seq_id]
        if num_cached >= num_full:
            return
        keys = self.block_keys(seq)
        table = self.req_to_blocks[seq.seq_id]
        provenances = (
            [self._provenance(seq, table, i) for i in range(num_cached, num_full)]
            if self.verify_tokens_on_hit
            else None
        )
        if self.block_pool.events is not None:
            self._log_stored(seq, keys, num_cached, num_full)
        self.block_pool.cache_full_blocks(keys, table, num_cached, num_full, provenances)
        self.num_cached_block[seq.seq_id] = num_full
        if self.parent_key is not None:
            for i in range(num_cached, num_full):
                self.parent_key[keys[i]] = keys[i - 1] if i else None

    def _log_stored(self, seq: Sequence, keys: list[bytes], first: int, stop: int) -> None:
        """vLLM's BlockStored for blocks [first, stop) of `seq`: one event per caching call, a
        key cached already included (vLLM publishes it again too)."""
        assert self.block_pool.events is not None
        bs = self.block_size
        self.block_pool.events.append(
            BlockStored(
                tuple(external_hash(k) for k in keys[first:stop]),
                external_hash(keys[first - 1]) if first else None,
                tuple(seq.token_ids[first * bs : stop * bs]),
                bs,
                seq.lora_id,
            )
        )

    # ---- decode runs (docs/design.md §5) -------------------------------------------
    def decode_run_blocks(self, seqs: list[Sequence], num_steps: int) -> int:
        """Blocks `num_steps` one-token steps of each of `seqs` allocate: step s of a request at
        c computed tokens needs cdiv(c + s + 1, B) blocks."""
        bs, tables = self.block_size, self.req_to_blocks
        return sum(
            max(cdiv(seq.num_computed_tokens + num_steps, bs) - len(tables[seq.seq_id]), 0)
            for seq in seqs
        )

    def allocate_decode_run(
        self, seqs: list[Sequence], num_steps: int, first_limits: list[int | None], lag: int
    ) -> None:
        """Replay `num_steps` steps of `allocate_slots(seq, 1, num_known_tokens=...)` for every seq
        in order. Only two things ever happen in such a call: a new block is taken from the free
        queue (evicting a cached one lazily) and newly full blocks are cached. Both are replayed
        as events in the per-step order (step, then position in `seqs`, allocation before
        caching); every other call is a no-op."""
        # (step, position, kind 0 alloc / 1 cache, limit)
        events: list[RunEvent] = []
        for pos, seq in enumerate(seqs):
            self._run_events(pos, seq, num_steps, first_limits[pos], lag, events)
        events.sort()
        tables, pool = self.req_to_blocks, self.block_pool
        for _, pos, kind, limit in events:
            seq = seqs[pos]
            if kind == 0:
                tables[seq.seq_id].extend(pool.get_new_blocks(1))
            else:
                self.cache_blocks(seq, limit)

    def _run_events(
        self,
        pos: int,
        seq: Sequence,
        num_steps: int,
        first_limit: int | None,
        lag: int,
        out: list[RunEvent],
    ) -> None:
        bs, c = self.block_size, seq.num_computed_tokens
        held = len(self.req_to_blocks[seq.seq_id])
        if held * bs < c:
            raise CacheIntegrityError(
                f"{seq.seq_id}: {held} blocks hold fewer than {c} computed tokens"
            )
        # Step s computes token c + s: it opens block `held` at c + s == held * B, then every B.
        out.extend((s, pos, 0, 0) for s in range(held * bs - c, num_steps, bs))
        if not self.enable_caching:
            return
        cached = self.num_cached_block[seq.seq_id]
        # Step 0 caps at the caller's limit (None: the c + 1 tokens known), step s >= 1 at
        # c + 1 + s - lag. The first two steps may catch up several blocks; from then on the cap
        # grows by one token a step, so a block is cached at each multiple of B past the last.
        for s in range(min(2, num_steps)):
            limit = (
                min(c + 1, c + 1 if first_limit is None else first_limit)
                if s == 0
                else c + 1 + s - lag
            )
            if limit // bs > cached:
                out.append((s, pos, 1, limit))
                cached = limit // bs
        first = max((cached + 1) * bs - (c + 1 - lag), 2)
        out.extend((s, pos, 1, c + 1 + s - lag) for s in range(first, num_steps, bs))

    # ---- release -----------------------------------------------------------------------------
    def free(self, seq: Sequence) -> None:
        """Free the table tail first (reverse order, §4.3), or head first in the counterfactual
        arm. Hash memo is kept (preemption)."""
        table = self.req_to_blocks.pop(seq.seq_id, None)
        self.num_cached_block.pop(seq.seq_id, None)
        if table:
            if not self.head_first:
                table.reverse()
            self.block_pool.free_blocks(table)

    def forget(self, seq: Sequence) -> None:
        """Free and drop the request's hash memo (finish or abort)."""
        self.free(seq)
        self._hashes.pop(seq.seq_id, None)

    def get_blocks(self, seq: Sequence) -> list[KVCacheBlock]:
        return self.req_to_blocks.get(seq.seq_id, [])

    def get_block_ids(self, seq: Sequence) -> list[int]:
        return [blk.block_id for blk in self.req_to_blocks.get(seq.seq_id, ())]

    def num_block_hashes(self, seq: Sequence) -> int:
        memo = self._hashes.get(seq.seq_id)
        return len(memo.keys) if memo is not None else 0

    def reset_prefix_cache(self) -> bool:
        if not self.block_pool.reset_prefix_cache():
            return False
        self.prefix_cache_stats.reset = True
        if self.parent_key is not None:
            self.parent_key.clear()
        return True

    def get_usage(self) -> float:
        return self.block_pool.get_usage()
