"""`StoragePages`: HiCache's storage tier (L3) as page keys, and each request's prefetch from it
(SGLang 0.5.23, `--hicache-storage-backend`; docs/tiers.md §10.2).

Storage holds every page the host pool ever held a written copy of (a backup follows each host
write); it never evicts (the file backend is unbounded). A prefetch is issued when a request
arrives, for the pages past its device + host match. Without a priced storage link it completes
at the next scheduler iteration; with one (`clocked`) its pages land in order as the link reads
them (`ReadTiming`), and it ends when admission terminates it. What the request takes from it at
admission is its prefetch policy's (upstream's `_can_terminate_prefetch`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engines.cache.storage_prefetch import ReadTiming
from engines.cache.storage_tier import StorageTierConfig

# A prefetch's states: in flight, done (its pages in the host pool), or nothing to fetch.
IN_FLIGHT, DONE, NONE = "in_flight", "done", "none"


@dataclass
class Prefetch:
    """One request's prefetch: its span starts `start` tokens in (the device + host match at
    arrival), `keys` are the storage hit's page keys from there, `parent` the key of the page
    before them (None at the root); `issued` the iteration it was issued in, `issued_s` when.
    With a priced link, `reserved` host pages are held back for it from the iteration after its
    issue (`allocated`), `timing` is its read's (None until the link queues it) and `deadline_s`
    when the timeout policy stops waiting. Once done, `loaded` tokens from `loaded_start` entered
    the host pool from storage (pages the host already held by then are not counted, as
    upstream's host insert frees them)."""

    start: int
    span: int = 0  # the tokens it asked for (page-aligned), reserved while in flight
    keys: list[int] = field(default_factory=list)
    parent: int | None = None
    issued: int = 0
    issued_s: float = 0.0
    allocated: bool = False
    reserved: int = 0
    timing: ReadTiming | None = None
    deadline_s: float = math.inf
    state: str = NONE
    loaded: int = 0
    loaded_start: int = 0


class StoragePages:
    """The stored page keys, the prefetches of requests not yet admitted, and the counters."""

    def __init__(self, config: StorageTierConfig, page: int, host_tokens: int) -> None:
        self.page = page
        self.policy = config.prefetch_policy
        # upstream's controller raises the threshold to one page (a hit is whole pages)
        self.threshold = max(config.prefetch_threshold, page)
        # prefetches in flight may reserve at most half the host pool (`prefetch_rate_limited`)
        self.occupancy_limit = host_tokens // 2
        self.occupied = 0
        self.timeout_base_s = config.prefetch_timeout_base
        self.timeout_per_token_s = config.prefetch_timeout_per_ki_token / 1024
        self.stored: set[int] = set()
        self.prefetches: dict[str, Prefetch] = {}
        self.round = 0  # scheduler iterations seen (`begin_round` calls)
        self.now_s = 0.0  # the current iteration's time on the run clock
        self.clocked = False  # prefetches follow their reads' timings (a priced link)
        self.queries = self.hits = self.written = self.loaded = 0

    def clear(self) -> None:
        """A flush: nothing in flight and the counters start over, as the host tier's do; the
        stored pages stay (a flush does not wipe the backend)."""
        self.prefetches.clear()
        self.occupied = 0
        self.queries = self.hits = self.written = self.loaded = 0

    def backup(self, keys: list[int]) -> list[int]:
        """Pages now held in the host pool are backed up to storage; the keys newly stored."""
        new = [k for k in keys if k not in self.stored]
        self.stored.update(new)
        self.written += len(new) * self.page
        return new

    def issue(self, seq_id: str, start: int, keys: list[int], parent: int | None) -> Prefetch:
        """A request arrived with `start` tokens matched; `keys` are its page keys from there
        (the span it may fetch). Not issued (state NONE) when the span is under the threshold
        or prefetches in flight already hold half the host pool. Otherwise it is in flight until
        the next iteration even when storage holds too little (upstream learns that from the
        hit query its thread answers, drained with the rest), and then fetches nothing."""
        p = self.page
        pf = Prefetch(start=start, parent=parent, issued=self.round, issued_s=self.now_s)
        self.prefetches[seq_id] = pf
        span = len(keys) * p
        if span < self.threshold or self.occupied >= self.occupancy_limit:
            return pf
        n = 0
        for key in keys:  # the backend's `batch_exists`: the longest stored run from the start
            if key not in self.stored:
                break
            n += 1
        self.queries += span
        self.hits += n * p
        fetch = keys[:n] if n * p >= self.threshold else []  # a hit under it is revoked
        pf.keys, pf.span, pf.state = fetch, span, IN_FLIGHT
        self.occupied += span
        return pf

    def due(self) -> list[Prefetch]:
        """The prefetches issued before this iteration and still in flight that complete now:
        all of them, or with a priced link those with nothing to read (a read ends when its
        request's admission terminates it)."""
        return [
            pf
            for pf in self.prefetches.values()
            if pf.state == IN_FLIGHT and pf.issued < self.round and not (self.clocked and pf.keys)
        ]

    # ---- on the read's clock (a priced link) -------------------------------------------------
    def to_allocate(self) -> list[tuple[str, Prefetch]]:
        """Timed prefetches whose hit query was answered in an earlier iteration and whose host
        pages are not allocated yet: upstream's scheduler drains the answer at the start of the
        next iteration, allocates the hit's host pages, and only then its I/O thread reads."""
        return [
            (seq_id, pf)
            for seq_id, pf in self.prefetches.items()
            if self.timed(pf) and not pf.allocated and pf.issued < self.round
        ]

    def allocate(self, pf: Prefetch, reserved: int) -> bool:
        """`reserved` of `pf`'s pages found host room: it reads those (its deadline counts
        them), or none under the threshold (upstream allocates a partial hit only if it reaches
        the threshold, else revokes the prefetch); whether it reads."""
        pf.allocated = True
        if reserved * self.page < self.threshold:
            return False
        pf.keys, pf.reserved = pf.keys[:reserved], reserved
        if self.policy == "timeout":
            pf.deadline_s = (
                pf.issued_s
                + self.timeout_base_s
                + (reserved * self.page * self.timeout_per_token_s)
            )
        return True

    def timed(self, pf: Prefetch) -> bool:
        """Whether `pf` follows its read's clock: a priced link and pages to read."""
        return self.clocked and pf.state == IN_FLIGHT and bool(pf.keys)

    def pages_done(self, pf: Prefetch) -> int:
        """Pages of `pf` in host memory now (the read lands them in order: a prefix)."""
        if pf.timing is None:
            return 0  # not queued on the link yet
        return pf.timing.tokens_done(self.now_s) // self.page

    def tokens_read(self, pf: Prefetch) -> int:
        """Tokens the link has read of `pf` if it is stopped now: the pages done and the page
        in progress (the I/O thread finishes the page it is on, then sees the termination)."""
        timing = pf.timing
        if timing is None or self.now_s <= timing.start_s:
            return 0
        return min(len(pf.keys), self.pages_done(pf) + 1) * self.page

    def take_now(self, pf: Prefetch) -> int | None:
        """A timed prefetch polled at admission: the pages its request takes if its policy
        terminates it now, None if the request must wait (upstream's `_can_terminate_prefetch`:
        best_effort at once, wait_complete when every page is done, timeout when every page is
        done or its deadline has come)."""
        done = self.pages_done(pf)
        if self.policy == "best_effort" or done == len(pf.keys):
            return done
        if self.policy == "timeout" and self.now_s >= pf.deadline_s:
            return done
        return None

    def waits_until_s(self, pf: Prefetch) -> float | None:
        """When a timed prefetch's request may next be let in, if that is later than now: its
        read's end, or (timeout) its deadline if earlier; None for best_effort or once due."""
        if pf.timing is None or self.policy == "best_effort":
            return None
        due = pf.timing.end_s
        if self.policy == "timeout":
            due = min(due, pf.deadline_s)
        return due if due > self.now_s else None

    def finish(self, pf: Prefetch, already_held: int, inserted: int) -> None:
        """`pf` completed: of its pages, the first `already_held` were in the host pool by
        then and the next `inserted` entered it (a full pool may take fewer)."""
        p = self.page
        pf.state = DONE
        pf.loaded = inserted * p
        pf.loaded_start = pf.start + already_held * p
        self.loaded += pf.loaded
        self.occupied -= pf.span

    def ready(self, seq_id: str) -> bool:
        """Whether admission may take the request now: its prefetch is not in flight, or the
        policy does not wait for it (best_effort stops it with nothing arrived yet)."""
        pf = self.prefetches.get(seq_id)
        if pf is None or pf.state != IN_FLIGHT:
            return True
        if self.policy != "best_effort":
            return False
        pf.state = NONE  # terminated before any page arrived: nothing enters the host pool
        self.occupied -= pf.span
        return True

    def pending(self) -> bool:
        """A prefetch in flight that a waiting request may still gain from by the next
        iteration: any, or with a priced link an untimed one or a timed one not yet due."""
        return any(
            pf.state == IN_FLIGHT
            and (not self.timed(pf) or pf.timing is None or self.waits_until_s(pf) is not None)
            for pf in self.prefetches.values()
        )

    def due_s(self) -> float | None:
        """The earliest time after now at which a timed prefetch lets its request in."""
        times = [
            t
            for pf in self.prefetches.values()
            if self.timed(pf) and (t := self.waits_until_s(pf)) is not None
        ]
        return min(times, default=None)


def split_by_tier(prefix: int, host: int, pf: Prefetch | None) -> tuple[int, int]:
    """(host, storage) tokens of an admitted prefix of `prefix` tokens whose last `host` came
    from the host pool: the storage part is the prefetched span within the prefix, wherever it
    now sits, and the host part is the rest of the host hit (SGLang 0.5.23
    `managers/schedule_batch.py` `split_cached_prefix_by_tier`)."""
    if pf is None or pf.loaded == 0:
        return host, 0
    start, end = pf.loaded_start, pf.loaded_start + pf.loaded
    storage = max(0, min(prefix, end) - max(0, start))
    in_host = max(0, min(prefix, end) - max(prefix - host, start))
    return host - in_host, storage
