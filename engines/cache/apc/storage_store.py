"""`StorageChunkStore`: the file-system secondary tier behind apc's CPU tier, as vLLM 0.33's
TieringOffloadingManager drives it (`vllm/v1/kv_offload/tiering/manager.py`, `tiering/fs/`,
`tiering/async_lookup.py`; docs/tiers.md §10.1).

Every chunk whose store into the CPU tier completes is written to storage (unbounded, never
evicted, kept by a reset). A lookup past the CPU tier asks storage one chunk at a time through an
asynchronous existence check: the first ask of a chunk answers "try later", and the answer, taken
when the step's asks are posted, is read from the next step on and kept while a request that
asked is alive. A chunk found there is promoted into the CPU tier (a CPU store: it can evict
there), readable from the next step; the GPU then loads it from the CPU tier as any CPU hit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engines.cache.apc.host_store import HostChunkStore
from engines.cache.apc.offload_policy import Key


@dataclass
class Verdict:
    """One chunk's existence check (upstream `LookupState`): None until its answer is read."""

    result: bool | None = None
    posted: bool = False  # the check was handed to the lookup thread at a step's end
    answer: bool = False  # what the thread found (read from the next step on)
    requests: set[str] = field(default_factory=set)


class StorageChunkStore:
    """The chunks in storage, the existence checks in flight, and the promotions to the CPU tier."""

    def __init__(self) -> None:
        self.files: set[Key] = set()
        self.verdicts: dict[Key, Verdict] = {}
        self.keys_of: dict[str, set[Key]] = {}  # the chunks each request asked about
        self.batch: list[Key] = []  # asks of this step, posted at its end
        self.posted: list[Key] = []  # asks the thread answers during the step
        self.promoting: list[Key] = []  # promotions planned this step (submitted at its end)
        self.in_flight: list[Key] = []  # promotions read from storage during the step
        self.unseen: list[Key] = []  # read, not yet seen by the manager (next step's end)
        self.sources: dict[str, set[Key]] = {}  # per request: chunks it promoted (vLLM DISK)
        self.written = self.read = 0  # chunks

    def busy(self) -> bool:
        """An ask or a promotion is in flight: the next step advances it."""
        return bool(self.batch or self.posted or self.promoting or self.in_flight or self.unseen)

    def ask(self, seq_id: str, key: Key) -> bool | None:
        """The tier's answer for `key` (upstream `AsyncLookupManager.lookup`): None = try later."""
        verdict = self.verdicts.get(key)
        if verdict is None:
            verdict = self.verdicts[key] = Verdict()
            self.batch.append(key)
        verdict.requests.add(seq_id)
        self.keys_of.setdefault(seq_id, set()).add(key)
        return verdict.result

    def lookup(self, seq_id: str, keys: list[Key], host: HostChunkStore) -> int | None:
        """vLLM's prefix scan over the tiers (`_maximal_prefix_lookup` over the tiering
        manager's `lookup`): the leading chunks held, None while any of them is not readable yet.
        A CPU chunk being written counts and the scan goes on; a storage hit is promoted and
        counts the same; an unanswered ask goes on without counting; a miss ends the scan."""
        hits, wait = 0, False
        for key in keys:
            if key in host.ready:
                hits += 1
                continue
            if key in host.pending:
                hits, wait = hits + 1, True
                continue
            found = self.ask(seq_id, key)
            if found is None:
                wait = True
                continue
            if not found or not self.promote(seq_id, key, host):
                break
            hits, wait = hits + 1, True
        return None if wait else hits

    def promote(self, seq_id: str, key: Key, host: HostChunkStore) -> bool:
        """A storage hit allocated in the CPU tier as a store of that one chunk (it may evict
        there); False when the CPU tier has no room (upstream then reports a miss)."""
        stored = host.offer(seq_id, [key])
        if stored is None:
            return False
        self.promoting += stored
        self.sources.setdefault(seq_id, set()).update(stored)
        return True

    def end_of_plan(self) -> None:
        """The step is planned (`on_schedule_end`): its asks go to the lookup thread, which sees
        the files as they are now, and its promotions to the read threads."""
        for key in self.batch:
            verdict = self.verdicts.get(key)
            if verdict is not None:
                verdict.posted, verdict.answer = True, key in self.files
        self.posted, self.batch = self.batch, []
        self.in_flight += self.promoting
        self.promoting = []

    def after_step(self, host: HostChunkStore, seen_now: bool) -> None:
        """The step ran: the answers are read (an ask no request holds any more is dropped) and
        the promotions read from storage. The manager polls finished reads at most once a step,
        at its first call; a CPU store offered after the step's end (`prepare_store`) makes that
        poll, so the next step's lookups do not, and the reads are seen only at the next step's
        end (`seen_now` False); else they are readable for the next step's lookups."""
        for key in self.posted:
            verdict = self.verdicts.get(key)
            if verdict is None or not verdict.posted:
                continue
            if not verdict.requests:
                del self.verdicts[key]
                continue
            verdict.result = verdict.answer
        self.posted = []
        self.read += len(self.in_flight)
        self.unseen += self.in_flight
        self.in_flight = []
        if seen_now:
            self.land(host)

    def land(self, host: HostChunkStore) -> None:
        """The manager polls its finished jobs: the promoted chunks become readable, the chunks
        the finished writes read are unpinned."""
        host.complete(self.unseen)
        self.unseen = []
        host.pinned.clear()

    def write(self, keys: list[Key], host: HostChunkStore) -> None:
        """A CPU store completed: its chunks are written to storage (the cascade); the write
        pins them in the CPU tier until the manager sees it done (its next poll)."""
        new = [k for k in keys if k not in self.files]
        self.files.update(new)
        self.written += len(new)
        host.pinned.update(keys)

    def promoted_tokens(self, seq_id: str, keys: list[Key], start: int, end: int, unit: int) -> int:
        """Of the loaded tokens [start, end), those in chunks this request promoted (vLLM's
        `get_external_cache_hit_sources`: DISK for them, HOST for the rest); `keys` are the
        loaded chunks, the first one holding `start`."""
        mine = self.sources.get(seq_id)
        if not mine:
            return 0
        first = start // unit
        total = 0
        for i, key in enumerate(keys):
            if key in mine:
                lo, hi = (first + i) * unit, (first + i + 1) * unit
                total += max(0, min(end, hi) - max(start, lo))
        return total

    def finish_request(self, seq_id: str) -> None:
        """The request is finalized: its asks lose it (one no request holds is dropped unless
        its answer is still in flight), its promotion sources are forgotten."""
        self.sources.pop(seq_id, None)
        for key in self.keys_of.pop(seq_id, ()):
            verdict = self.verdicts[key]
            verdict.requests.discard(seq_id)
            if not verdict.requests and not (verdict.posted and verdict.result is None):
                del self.verdicts[key]

    def reset(self) -> None:
        """A prefix-cache reset (upstream `reset_cache`): transfers drain, promotions in flight
        land, the load sources are forgotten; files and answers stay."""
        self.promoting, self.in_flight, self.unseen = [], [], []
        self.sources.clear()
