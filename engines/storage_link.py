"""Pricing a storage tier's transfers in time (docs/tiers.md §10.3): reads storage -> host memory
and writes host memory -> storage on the preset's `storage_bandwidth`, beside compute, as both
upstreams' I/O threads run. A read's request cannot load the KV to the device before its read has
ended: the host link makes that load wait (engines/host_link.py). Writes never delay a step; their
backlog is reported, as the host link's stores are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


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
        self.reset()

    def reset(self) -> None:
        self.read_bytes = self.write_bytes = 0
        self.read_s = self.write_s = self.read_stall_s = self.max_backlog_s = 0.0
        self._read_free_s = self._write_free_s = 0.0
        self._ready_s: dict[str, float] = {}  # per request: when its last read has ended

    def _seconds(self, num_bytes: int) -> float:
        return num_bytes / self.bandwidth if self.bandwidth else 0.0

    def queue(self, at_s: float, reads: Iterable[tuple[str, int]], writes: Iterable[int]) -> None:
        """Reads and writes decided before `at_s` start on their direction from then, in order."""
        for seq_id, tokens in reads:
            num_bytes = int(tokens * self.bytes_per_token)
            seconds = self._seconds(num_bytes)
            self._read_free_s = max(self._read_free_s, at_s) + seconds
            self._ready_s[seq_id] = self._read_free_s
            self.read_bytes += num_bytes
            self.read_s += seconds
        for tokens in writes:
            num_bytes = int(tokens * self.bytes_per_token)
            seconds = self._seconds(num_bytes)
            self._write_free_s = max(self._write_free_s, at_s) + seconds
            self.write_bytes += num_bytes
            self.write_s += seconds
        self.max_backlog_s = max(self.max_backlog_s, self._write_free_s - at_s)

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
