"""The real executor's host KV pool: real K/V copies behind a host tier (docs/tiers.md §7.3).

One K and one V tensor per layer in host memory (pinned on CUDA), `units x unit_tokens` token
rows, a unit per tier key (an apc chunk, a radix page). The tier decides what is stored, dropped
and loaded and logs it (engines/cache/tiers.py copy events); this pool only moves the bytes: a
store copies device slots into the key's unit, a load copies the units back into the device
slots allocated for the hit, before the forward that reads them.
"""

from __future__ import annotations

import time
from collections.abc import Hashable

import numpy as np
import torch

from engines.cache.tiers import (
    HostEvent,
    HostEvict,
    HostLoad,
    HostReset,
    HostStore,
    StorageBackup,
    StorageFetch,
)
from engines.kv_pool import KVPool


class HostKVPool:
    """Host copies of K/V units keyed by the tier's keys."""

    def __init__(self, device_pool: KVPool, num_units: int, unit_tokens: int) -> None:
        self.device_pool = device_pool
        self.unit = unit_tokens
        pin = device_pool.device.type == "cuda"
        shape = (num_units * unit_tokens, device_pool.num_kv_heads, device_pool.head_dim)

        def host() -> torch.Tensor:
            return torch.zeros(shape, dtype=device_pool.dtype, pin_memory=pin)

        self.k = [host() for _ in range(device_pool.num_layers)]
        self.v = [host() for _ in range(device_pool.num_layers)]
        self.unit_of: dict[Hashable, int] = {}
        self.free = list(range(num_units - 1, -1, -1))
        # (device slots, host rows) of stores whose K/V the coming forward computes
        self.deferred: list[tuple[np.ndarray, np.ndarray]] = []
        # a storage tier's copies: key -> its unit's K and V rows, every layer stacked
        self.storage: dict[Hashable, tuple[torch.Tensor, torch.Tensor]] = {}

    def before_forward(self, events: list[HostEvent]) -> None:
        """Apply the tier's decisions in order: drop, store what is computed, load; stores of
        K/V the coming forward computes wait for `after_forward`."""
        for event in events:
            if isinstance(event, HostEvict):
                for key in event.keys:
                    unit = self.unit_of.pop(key, None)
                    if unit is not None:
                        self.free.append(unit)
            elif isinstance(event, HostReset):
                self.free += self.unit_of.values()
                self.unit_of.clear()
            elif isinstance(event, HostStore):
                rows = self._host_rows(event.keys, claim=True)
                if event.ready:
                    self._store(event.slots, rows)
                else:
                    self.deferred.append((event.slots, rows))
            elif isinstance(event, StorageBackup | StorageFetch):
                self._storage(event)
            else:
                self._load(event)

    def _storage(self, event: StorageBackup | StorageFetch) -> None:
        """A backup copies each key's host unit out to storage (a flush keeps it); a fetch
        gives each key a host unit and copies its storage copy in."""
        fetch = isinstance(event, StorageFetch)
        for key in event.keys:
            rows = torch.as_tensor(self._host_rows((key,), claim=fetch))
            if fetch:
                k, v = self.storage[key]
                for layer in range(len(self.k)):
                    self.k[layer][rows] = k[layer]
                    self.v[layer][rows] = v[layer]
            elif key not in self.storage:
                self.storage[key] = (
                    torch.stack([t.index_select(0, rows) for t in self.k]),
                    torch.stack([t.index_select(0, rows) for t in self.v]),
                )

    def after_forward(self) -> None:
        for slots, rows in self.deferred:
            self._store(slots, rows)
        self.deferred = []

    def _host_rows(self, keys: tuple[Hashable, ...], claim: bool) -> np.ndarray:
        """Host token rows of `keys`' units, in order (claim: give a new key a free unit)."""
        units = []
        for key in keys:
            unit = self.unit_of.get(key)
            if unit is None:
                if not claim or not self.free:
                    raise RuntimeError(f"host KV pool: no unit for key {key!r}")
                unit = self.unit_of[key] = self.free.pop()
            units.append(unit)
        base = np.asarray(units, dtype=np.int64)[:, None] * self.unit
        return (base + np.arange(self.unit, dtype=np.int64)).reshape(-1)

    def _store(self, slots: np.ndarray, rows: np.ndarray) -> None:
        dev = torch.as_tensor(slots, device=self.device_pool.device)
        host = torch.as_tensor(rows)
        pool = self.device_pool
        for layer in range(pool.num_layers):
            for src, dst in (
                (pool.k_cache[layer], self.k[layer]),
                (pool.v_cache[layer], self.v[layer]),
            ):
                flat = src.view(-1, *src.shape[2:])
                dst.index_copy_(0, host, flat.index_select(0, dev).to("cpu"))

    def _load(self, event: HostLoad) -> None:
        """Copy a hit back into its device slots; its wall time is the request's load time."""
        start = time.perf_counter()
        rows = self._host_rows(event.keys, claim=False)
        rows = rows[event.offset : event.offset + len(event.slots)]
        pool = self.device_pool
        dev = torch.as_tensor(event.slots, device=pool.device)
        host = torch.as_tensor(rows)
        for layer in range(pool.num_layers):
            for src, dst in (
                (self.k[layer], pool.k_cache[layer]),
                (self.v[layer], pool.v_cache[layer]),
            ):
                staged = src.index_select(0, host)
                if pool.device.type == "cuda":
                    staged = staged.pin_memory()
                flat = dst.view(-1, *dst.shape[2:])
                flat.index_copy_(0, dev, staged.to(pool.device, non_blocking=True))
        if pool.device.type == "cuda":
            torch.cuda.synchronize(pool.device)
        event.seq.host_load_s += time.perf_counter() - start
