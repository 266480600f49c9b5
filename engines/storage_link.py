"""Pricing a storage tier's transfers in time (docs/tiers.md §10.3): reads storage -> host memory
and writes host memory -> storage on the preset's `storage_bandwidth`, beside compute, as both
upstreams' I/O threads run. A read's request cannot load the KV to the device before its read has
ended: the host link makes that load wait (engines/host_link.py). Writes never delay a step; their
backlog is reported, as the host link's stores are.

Reads run one after another in the order they were queued (HiCache's prefetch I/O thread takes
one operation at a time). The link keeps each read's `ReadTiming` for a tier that admits against
the read's clock (radix's prefetch, `TimedStorageReads`): such a tier ends a read itself when its
prefetch is terminated (`Transfers.storage_ends`); a read cut short frees the link from the end of
its page in progress, and the reads queued behind it move up (their new timings are taken again).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engines.cache.storage_prefetch import ReadTiming


@dataclass(frozen=True)
class StorageLinkFigures:
    """A run's storage-link totals: bytes each way, each direction's busy seconds, the step time
    loads spent waiting for their storage reads, and the largest write backlog (seconds)."""

    bandwidth_bytes_per_s: float | None
    kv_bytes_per_token: float
    read_bytes: int
    write_bytes: int
    read_s: float
    write_s: float
    read_stall_s: float
    max_write_backlog_s: float


class StorageLinkPricing:
    """One engine's storage link. Reads and writes run in separate directions, each at the full
    bandwidth: both upstreams issue them from separate thread pools (vLLM's fs tier: load and
    store jobs; HiCache: the prefetch and backup threads), and an NVMe drive serves reads and
    writes concurrently; a shared queue would let a write backlog stall every promotion."""

    def __init__(self, bandwidth: float | None, kv_bytes_per_token: float) -> None:
        self.bandwidth = bandwidth  # None: bytes counted, no time priced
        self.bytes_per_token = kv_bytes_per_token
        self.timed = False  # whether a tier takes the reads' timings (`take_timings`)
        self.reset()

    def reset(self) -> None:
        self.read_bytes = self.write_bytes = 0
        self.read_s = self.write_s = self.read_stall_s = self.max_backlog_s = 0.0
        self._read_free_s = self._write_free_s = 0.0
        self._ready_s: dict[str, float] = {}  # per request: when its last read has ended
        # reads not yet known to have ended, in queue order (a cut moves the later ones up)
        self._reads: dict[str, ReadTiming] = {}
        self._timings: dict[str, ReadTiming] = {}  # new or moved since `take_timings`

    @property
    def priced(self) -> bool:
        return bool(self.bandwidth)

    def _seconds(self, num_bytes: int) -> float:
        return num_bytes / self.bandwidth if self.bandwidth else 0.0

    def queue(
        self,
        at_s: float,
        reads: Iterable[tuple[str, int]],
        writes: Iterable[int],
        ends: Iterable[tuple[str, int]] = (),
    ) -> None:
        """Reads and writes decided before `at_s` start on their direction from then, in order;
        `ends` first: reads their tier ended after (request, tokens) were read."""
        for seq_id, tokens in ends:
            self._end(seq_id, tokens)
        for seq_id, tokens in reads:
            num_bytes = int(tokens * self.bytes_per_token)
            seconds = self._seconds(num_bytes)
            start_s = max(self._read_free_s, at_s)
            self._read_free_s = start_s + seconds
            self._ready_s[seq_id] = self._read_free_s
            if self.timed:
                self._reads[seq_id] = self._timings[seq_id] = ReadTiming(
                    start_s, self._read_free_s, tokens
                )
            self.read_bytes += num_bytes
            self.read_s += seconds
        for seq_id in [k for k, t in self._reads.items() if t.end_s <= at_s]:
            del self._reads[seq_id]  # ended: no later cut can shorten it
        for tokens in writes:
            num_bytes = int(tokens * self.bytes_per_token)
            seconds = self._seconds(num_bytes)
            self._write_free_s = max(self._write_free_s, at_s) + seconds
            self.write_bytes += num_bytes
            self.write_s += seconds
        self.max_backlog_s = max(self.max_backlog_s, self._write_free_s - at_s)

    def _end(self, seq_id: str, tokens: int) -> None:
        """`seq_id`'s read is over once `tokens` of it are read: nothing waits for it any more,
        and the rest is never read, so the reads behind it start that much earlier."""
        self._ready_s.pop(seq_id, None)
        read = self._reads.pop(seq_id, None)
        self._timings.pop(seq_id, None)
        if read is None or tokens >= read.tokens:
            return
        unread = int(read.tokens * self.bytes_per_token) - int(tokens * self.bytes_per_token)
        saved = self._seconds(unread)
        self.read_bytes -= unread
        self.read_s -= saved
        self._read_free_s -= saved
        later = [k for k, t in self._reads.items() if t.start_s >= read.end_s]
        for k in later:
            t = self._reads[k]
            moved = ReadTiming(t.start_s - saved, t.end_s - saved, t.tokens)
            self._reads[k] = self._timings[k] = moved
            if k in self._ready_s:
                self._ready_s[k] = moved.end_s

    def take_timings(self) -> dict[str, ReadTiming]:
        """The reads queued or moved since the last call: when each runs."""
        out, self._timings = self._timings, {}
        return out

    def wait(self, seq_id: str, at_s: float) -> float:
        """Seconds a load of `seq_id` that could start at `at_s` waits for its storage read."""
        ready = self._ready_s.pop(seq_id, None)
        if ready is None or ready <= at_s:
            return 0.0
        self.read_stall_s += ready - at_s
        return ready - at_s

    def figures(self) -> StorageLinkFigures:
        return StorageLinkFigures(
            self.bandwidth,
            self.bytes_per_token,
            self.read_bytes,
            self.write_bytes,
            self.read_s,
            self.write_s,
            self.read_stall_s,
            self.max_backlog_s,
        )
