"""A throwaway third cache design for tests: exact-match block reuse, registered only by a test.

`ExactCache` keeps full blocks keyed by a chained content hash and reuses a block only when its
tokens and its parent match exactly. It evicts the least recently freed unreferenced block when an
allocation needs one, and makes blocks matchable only through `commit` (as radix does). It
declares `PrefixPeek` and `KvEventSource` and nothing else optional: what the harness needs of a
design for a `kv_aware` fleet and a step-locked replay, with no line of harness/ naming it.
"""

from __future__ import annotations

import copy
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from collections.abc import Sequence as Ids
from contextlib import contextmanager
from dataclasses import dataclass, replace

from engines.cache import DESIGNS
from engines.cache.addressing import TableJournal
from engines.cache.design import CacheDesign, FigureStyle
from engines.cache.protocol import KvEventSource, PrefixCache, PrefixPeek, UndoableCache
from engines.cache.records import (
    AllBlocksCleared,
    Allocation,
    BlockRemoved,
    BlockStored,
    CacheIntegrityError,
    CacheStats,
    CacheUsage,
    KvEvent,
    PrefixMatch,
)
from engines.config import DESIGN_KNOBS, UPSTREAM_SCHEDULER, EngineConfig
from engines.sequence import Sequence

NAME = "exact"
Handle = list[int]  # the matched block ids
Lock = tuple[int, ...]  # the block ids a lock took a reference on


def chain(token_ids: Ids[int], block_size: int, lora_id: str | None, salt: str | None) -> list[int]:
    """64-bit chained hashes of the full blocks: each over its parent's hash and its tokens."""
    out, parent = [], f"{lora_id}|{salt}".encode()
    for start in range(0, len(token_ids) // block_size * block_size, block_size):
        block = ",".join(map(str, token_ids[start : start + block_size])).encode()
        parent = hashlib.blake2b(parent + b"/" + block, digest_size=8).digest()
        out.append(int.from_bytes(parent, "big"))
    return out


@dataclass
class _Held:
    table: list[int]  # block ids, in token order
    cached: int  # leading blocks of the table that are cached (keyed)


class ExactCache(PrefixCache[Handle, Lock], PrefixPeek, KvEventSource, UndoableCache):
    name = NAME
    matchable_at_allocation = False

    def __init__(self, num_blocks: int, block_size: int, *, enabled: bool = True) -> None:
        self.enabled, self.num_blocks, self.block_size = enabled, num_blocks, block_size
        self.table_journal = TableJournal()
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, num_blocks))
        self._refs: dict[int, int] = {}
        self._key_of: dict[int, int] = {}  # cached block -> its chain hash
        self._block_of: dict[int, int] = {}  # chain hash -> block
        self._tokens: dict[int, tuple[int, ...]] = {}  # cached block -> its tokens (exactness)
        self._held: dict[str, _Held] = {}
        self._stats = CacheStats()
        self._events: list[KvEvent] | None = None

    # ------------------------------------------------------------------ reuse
    def _hits(self, seq: Sequence, num_tokens: int) -> list[int]:
        if not self.enabled:
            return []
        bs, hits = self.block_size, []
        for i, key in enumerate(chain(seq.token_ids[:num_tokens], bs, seq.lora_id, seq.salt)):
            block = self._block_of.get(key)
            if block is None or self._tokens[block] != tuple(seq.token_ids[i * bs : (i + 1) * bs]):
                break
            hits.append(block)
        return hits

    def match(self, seq: Sequence, *, capped: bool = True) -> PrefixMatch[Handle]:
        hits = self._hits(seq, seq.num_tokens - 1 if capped else seq.num_tokens)
        return PrefixMatch(len(hits) * self.block_size, hits)

    def cached_prefix_tokens(self, seq: Sequence) -> int:
        return len(self._hits(seq, seq.num_tokens)) * self.block_size

    def lock(self, match: PrefixMatch[Handle]) -> Lock:
        for block in match.handle:
            self._ref(block)
        return tuple(match.handle)

    def unlock(self, lock: Lock) -> None:
        for block in reversed(lock):
            self._unref(block)

    def commit(self, seq: Sequence, num_tokens: int) -> None:
        held = self._held.get(seq.seq_id)
        if held is None or not self.enabled:
            return
        bs, full = self.block_size, min(num_tokens // self.block_size, len(held.table))
        keys = chain(seq.token_ids[: full * bs], bs, seq.lora_id, seq.salt)
        stored = []
        for i in range(held.cached, full):
            block, key = held.table[i], keys[i]
            if key not in self._block_of:  # a duplicate stays uncached, as in vLLM
                self._block_of[key], self._key_of[block] = block, key
                self._tokens[block] = tuple(seq.token_ids[i * bs : (i + 1) * bs])
                stored.append(i)
        if stored and self._events is not None:
            first = stored[0]
            self._events.append(
                BlockStored(
                    tuple(keys[i] for i in stored),
                    keys[first - 1] if first else None,
                    tuple(t for i in stored for t in seq.token_ids[i * bs : (i + 1) * bs]),
                    bs,
                )
            )
        held.cached = max(held.cached, full)

    def evict(self, num_tokens: int) -> None:
        """Nothing: allocation evicts the least recently freed block as it takes one."""

    def usage(self) -> CacheUsage:
        bs = self.block_size
        evictable = sum(1 for b in self._free if b in self._key_of)
        return CacheUsage(
            self.capacity_tokens, len(self._free) * bs, evictable * bs, len(self._refs) * bs
        )

    def check_integrity(self) -> None:
        if len(self._free) + len(self._refs) != self.num_blocks - 1:
            raise CacheIntegrityError(f"{len(self._free)} free + {len(self._refs)} held blocks")

    def reset(self) -> bool:
        if self._held:
            return False
        self._key_of.clear()
        self._block_of.clear()
        self._tokens.clear()
        self._stats = CacheStats()
        if self._events is not None:
            self._events.append(AllBlocksCleared())
        return True

    # ------------------------------------------------------------- allocation
    @property
    def capacity_tokens(self) -> int:
        return (self.num_blocks - 1) * self.block_size

    def free_tokens(self) -> int:
        return len(self._free) * self.block_size

    def allocate(self, items: list[Allocation[Handle, Lock]]) -> bool:
        for i, item in enumerate(items):
            if not self._allocate_one(item):
                if i:
                    raise CacheIntegrityError("out of KV blocks part-way through a batch")
                return False
        return True

    def _allocate_one(self, item: Allocation[Handle, Lock]) -> bool:
        seq, bs = item.seq, self.block_size
        held = self._held.get(seq.seq_id)
        adopted = list(item.adopt.handle) if held is None and item.adopt is not None else []
        have = len(held.table) if held is not None else len(adopted)
        done = seq.num_computed_tokens if held is not None else len(adopted) * bs
        grow = max(0, -(-(done + item.num_new_tokens) // bs) - have)
        need = grow
        if item.whole_sequence_must_fit:
            need = max(need, -(-seq.num_tokens // bs) - have)
        reusable = sum(1 for b in adopted if b in self._free)  # locking takes them off the queue
        if need > len(self._free) - (reusable if item.lock is None else 0):
            return False
        first = 0 if held is None else len(held.table)  # the first table entry that is new
        if held is None:
            if item.lock is None:
                self.lock(PrefixMatch(len(adopted) * bs, adopted))
            held = self._held[seq.seq_id] = _Held(adopted, len(adopted))
        for _ in range(grow):
            held.table.append(self._take())
        if len(held.table) > first:
            self.table_journal.write(seq.seq_id, first)
        return True

    def _take(self) -> int:
        block, _ = self._free.popitem(last=False)
        key = self._key_of.pop(block, None)
        if key is not None:  # evicted
            del self._block_of[key], self._tokens[block]
            self._stats.num_evictions += 1
            self._stats.evicted_tokens += self.block_size
            if self._events is not None:
                self._events.append(BlockRemoved((key,)))
        self._refs[block] = 1
        return block

    def _ref(self, block: int) -> None:
        self._free.pop(block, None)
        self._refs[block] = self._refs.get(block, 0) + 1

    def _unref(self, block: int) -> None:
        self._refs[block] -= 1
        if not self._refs[block]:
            del self._refs[block]
            self._free[block] = None
            if block not in self._key_of:  # nothing to keep: reused first
                self._free.move_to_end(block, last=False)

    def release(self, seq: Sequence, *, finished: bool) -> None:
        held = self._held.pop(seq.seq_id, None)
        if held is not None:
            self.table_journal.release(seq.seq_id)
            for block in reversed(held.table):
                self._unref(block)

    def block_table(self, seq: Sequence) -> list[int]:
        held = self._held.get(seq.seq_id)
        return list(held.table) if held is not None else []

    def block_ids_from(self, seq_id: str, start: int) -> list[int]:
        return self._held[seq_id].table[start:]

    # ------------------------------------------------------------ bookkeeping
    def record_admission(
        self, num_cached: int, num_new: int, *, new_request: bool, retried: bool
    ) -> None:
        self._stats.record(num_cached, num_new, new_request=new_request, retried=retried)

    def stats(self) -> CacheStats:
        return replace(self._stats)

    # ---------------------------------------------------------------- events
    def record_kv_events(self) -> None:
        if self._events is None:
            self._events = []

    def take_kv_events(self) -> list[KvEvent]:
        if self._events is None:
            return []
        out, self._events = self._events, []
        return out

    def kv_event_hashes(
        self, token_ids: Ids[int], lora_id: str | None, salt: str | None
    ) -> list[int]:
        return chain(token_ids, self.block_size, lora_id, salt)

    # ------------------------------------------------------------------ undo
    def checkpoint(self) -> Callable[[], None]:
        """A toy's undo: its whole state copied (the step lock's trial; a real design journals
        only what a step touches, as apc does)."""
        saved = copy.deepcopy(self.__dict__)

        def undo() -> None:
            self.__dict__.clear()
            self.__dict__.update(saved)

        return undo


def build_exact(config: EngineConfig) -> ExactCache:
    return ExactCache(config.num_blocks, config.block_size, enabled=config.prefix_caching)


DESIGN = CacheDesign(
    name=NAME,
    build=build_exact,
    upstream_scheduler="vllm",
    knobs=(),
    block_size=16,
    unit="block",
    label="exact-match block reuse (a test's design)",
    style=FigureStyle(colour="#7f7f7f", off_colour="#c7c7c7"),
)


@contextmanager
def registered() -> Iterator[CacheDesign]:
    """The design in the registry (and the config's lists derived from it) for one test."""
    DESIGNS.add(NAME, DESIGN)
    UPSTREAM_SCHEDULER[NAME], DESIGN_KNOBS[NAME] = DESIGN.upstream_scheduler, DESIGN.knobs
    try:
        yield DESIGN
    finally:
        DESIGNS.remove(NAME)
        del UPSTREAM_SCHEDULER[NAME], DESIGN_KNOBS[NAME]
