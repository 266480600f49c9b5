"""Pricing a host KV tier's transfers in time (docs/tiers.md §7): loads host -> device and
stores device -> host over the host link, each direction at the link's one-way bandwidth.

How a load overlaps the forward is the design's upstream rule (`HostTier.host_load_overlap`):
vLLM's connector finishes a request's load before the request computes, so a step that carries
loads waits for them; HiCache streams the load layer by layer and each layer's attention waits
only for its own layer. Stores are written after the compute that made their KV and never delay a
step; the link's store backlog is reported. Both executors use it (simulated: priced on the
virtual clock; real: the copies' own time is measured, this counts the bytes). With a storage
tier the simulated link also carries its `StorageLinkPricing` (engines/storage_link.py): a load
whose KV is still being read from storage starts when that read ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engines.cache.tiers import LOAD_BEFORE_STEP, LOAD_LAYERWISE, Transfers
from engines.storage_link import StorageLinkPricing


@dataclass(frozen=True)
class LinkFigures:
    """A run's host-link totals: bytes each way, the loads' link time, the step time they added
    (the part no compute hid), and the largest store backlog (seconds of stores still queued when
    a step ended)."""

    bandwidth_bytes_per_s: float | None
    kv_bytes_per_token: float
    load_bytes: int
    store_bytes: int
    load_s: float
    load_stall_s: float
    max_store_backlog_s: float


def layered_step_s(compute_s: float, load_s: float, num_layers: int) -> float:
    """A forward of `num_layers` equal layers whose layer i waits for the i-th of equal load
    parts sent back to back: the pipeline ends after all loads plus one layer's compute, or after
    all compute plus one layer's load, whichever is later."""
    return max(load_s + compute_s / num_layers, compute_s + load_s / num_layers)


class HostLinkPricing:
    """The host link of one engine: prices each step's tier transfers and tallies them."""

    def __init__(
        self,
        bandwidth: float | None,
        kv_bytes_per_token: float,
        rule: str,
        num_layers: int,
        storage: StorageLinkPricing | None = None,
    ) -> None:
        if rule not in (LOAD_BEFORE_STEP, LOAD_LAYERWISE):
            raise ValueError(f"unknown load overlap rule {rule!r}")
        self.bandwidth = bandwidth  # None: transfers are counted, not priced
        self.bytes_per_token = kv_bytes_per_token
        self.rule = rule
        self.num_layers = max(num_layers, 1)
        self.load_bytes = self.store_bytes = 0
        self.load_s = self.load_stall_s = self.max_backlog_s = 0.0
        self._store_free_s = 0.0  # when the store direction has sent everything queued
        self.storage = storage  # a storage tier's link (None: no storage tier or not priced)

    def reset(self) -> None:
        """A new measured window: zero the totals (the clock restarts with the run)."""
        self.load_bytes = self.store_bytes = 0
        self.load_s = self.load_stall_s = self.max_backlog_s = self._store_free_s = 0.0
        if self.storage is not None:
            self.storage.reset()

    def _seconds(self, num_bytes: int) -> float:
        return num_bytes / self.bandwidth if self.bandwidth else 0.0

    def step(self, start_s: float, compute_s: float, transfers: Transfers) -> float:
        """The step's time given its compute time and the transfers it carries; stamps each
        loading request's bytes and load time (a request's stored tokens are the tier's count)."""
        storage = self.storage
        if storage is not None:  # reads decided while planning start with the step
            storage.queue(
                start_s, transfers.storage_reads, transfers.storage_writes, transfers.storage_ends
            )
        load_s = wait_s = 0.0  # wait_s: loads held back by their storage reads
        for seq, tokens in transfers.loads:  # one after another on the link, in plan order
            num_bytes = int(tokens * self.bytes_per_token)
            if storage is not None:
                wait_s += storage.wait(seq.seq_id, start_s + wait_s + load_s)
            load_s += self._seconds(num_bytes)
            seq.host_load_bytes += num_bytes
            seq.host_load_s += load_s
            self.load_bytes += num_bytes
        if self.rule == LOAD_BEFORE_STEP:
            step_s = load_s + compute_s
        else:
            step_s = layered_step_s(compute_s, load_s, self.num_layers) if load_s else compute_s
        self.load_s += load_s
        self.load_stall_s += step_s - compute_s
        if wait_s:  # the loads (and the forward reading them) start after the storage reads
            step_s += wait_s
        end_s = start_s + step_s
        self._queue_stores(end_s, transfers)
        return step_s

    def stores(self, end_s: float, transfers: Transfers) -> None:
        """No step runs: queue `transfers.stores` on the store direction from `end_s` (after
        their compute), and a storage tier's transfers on its link from then."""
        if self.storage is not None:
            self.storage.queue(
                end_s, transfers.storage_reads, transfers.storage_writes, transfers.storage_ends
            )
        self._queue_stores(end_s, transfers)

    def _queue_stores(self, end_s: float, transfers: Transfers) -> None:
        queued = sum(int(tokens * self.bytes_per_token) for _, tokens in transfers.stores)
        self.store_bytes += queued
        if queued:
            self._store_free_s = max(self._store_free_s, end_s) + self._seconds(queued)
        self.max_backlog_s = max(self.max_backlog_s, self._store_free_s - end_s)

    def figures(self) -> LinkFigures:
        return LinkFigures(
            self.bandwidth,
            self.bytes_per_token,
            self.load_bytes,
            self.store_bytes,
            self.load_s,
            self.load_stall_s,
            self.max_backlog_s,
        )


@runtime_checkable
class CarriesHostLink(Protocol):
    """An executor that prices or counts a host tier's transfers (None: the cache has no tier)."""

    host_link: HostLinkPricing | None

    def host_idle(self) -> None:
        """Nothing runs: carry out the stores the tier made since the last step (a request that
        finished in the last step is stored after it)."""
        ...

    def host_waiting(self) -> None:
        """An iteration ran no step while its scheduler waits for a transfer: a storage read
        priced on its own clock (`TimedStorageReads`) starts now, with whatever else the tier
        logged; nothing otherwise (the next step takes the transfers, as before)."""
        ...
