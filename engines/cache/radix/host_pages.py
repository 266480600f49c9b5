"""`HostPages`: HiCache's host pool as page keys, and what SGLang 0.5.23 may drop from it when a
write finds it full (docs/tiers.md §3.5). Upstream frees host room only from host leaves: nodes the
device has evicted, with no child, not locked, whole nodes, least recently used first
(`mem_cache/unified_cache/unified_tree_core.py` `_is_host_leaf`, `components/full.py`
`drive_host_eviction`); a write that finds no such room fails and the node stays device-only
(`mem_cache/unified_radix_cache.py` `_execute_kv_backup`). Under write_back, host copies of pages
also on the device (loaded back) are reclaimed first (`_reclaim_full_host_duplicates`).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from engines.cache.tiers import HostEvict, HostStore, StorageRead, TransferLog


class HostPages:
    """The host copies (least recently used first), which keys are on the device, each kept
    key's parent, and the host-only runs a device eviction leaves (upstream's evicted nodes)."""

    def __init__(self, pages: int, write_back: bool, log: TransferLog) -> None:
        self.room = pages
        self.write_back = write_back
        self.log = log
        self.held: OrderedDict[int, None] = OrderedDict()
        self.resident: set[int] = set()  # keys whose page the device tree holds
        # the held keys the device does not hold, in `held`'s order (the only ones a write may
        # drop), and under write_back those it does (loaded back), in the order they became so:
        # each search for room walks its candidates only
        self.host_only: OrderedDict[int, None] = OrderedDict()
        self.dups: OrderedDict[int, None] = OrderedDict()
        self.parent: dict[int, int | None] = {}  # keys held or resident -> the page before
        self.kids: dict[int, int] = {}  # key -> its children held or resident
        self.run_of: dict[int, int] = {}  # host-only key -> its run (an evicted node)
        self.runs: dict[int, list[int]] = {}
        self.next_run = 0
        # each request's host hit from its lookup to its load, within one admission pass: the
        # pass's allocation may evict device pages (write_back writes them) but not drop a hit
        # it is about to load, as upstream's load-back holds a host lock on the matched nodes
        # while it allocates (mem_cache/unified_radix_cache.py `load_back`)
        self.pins: dict[str, list[int]] = {}
        # pages held back for storage reads in flight (upstream allocates a prefetch's host
        # pages before reading into them); always 0 unless a priced link times the reads
        self.reserved = 0
        self.evicted = 0

    def clear(self) -> None:
        self.held.clear()
        self.resident.clear()
        self.host_only.clear()
        self.dups.clear()
        self.parent.clear()
        self.kids.clear()
        self.run_of.clear()
        self.runs.clear()
        self.pins.clear()
        self.reserved = 0
        self.evicted = 0

    # ---- where each page is -----------------------------------------------------------------
    def on_device(self, keys: list[int], start: int) -> None:
        """Pages start.. of the chain `keys` are now in the device tree (inserted or loaded)."""
        for j in range(start, len(keys)):
            key = keys[j]
            if key in self.resident:
                continue
            if key not in self.held:
                self._link(key, keys[j - 1] if j else None)
            else:
                self.host_only.pop(key, None)
                if self.write_back:
                    self.dups[key] = None
            self.resident.add(key)
            run = self.run_of.pop(key, None)
            if run is not None:  # its evicted node is split: the rest stays host-only
                self.runs[run].remove(key)
                if not self.runs[run]:
                    del self.runs[run]

    def off_device(self, keys: list[int], start: int) -> None:
        """The device evicted pages start.. of `keys` (one leaf): those held become one
        host-only run, evicted from the host as a whole, as upstream's demoted node is."""
        run = []
        for key in keys[start:]:
            self.resident.discard(key)
            self.dups.pop(key, None)
            if key in self.held:
                run.append(key)
            else:
                self._unlink(key)
        if run:
            for key in run:
                old = self.run_of.get(key)
                if old is not None:
                    self.runs[old].remove(key)
                self.run_of[key] = self.next_run
            self.runs[self.next_run] = run
            self.next_run += 1
            for key in reversed(run):  # host leaves go in the order the device let them go
                self.held.move_to_end(key)
                self.host_only[key] = None
                self.host_only.move_to_end(key)

    def split_after(self, key: int) -> None:
        """A lookup's host hit ends at `key` inside a host-only run: upstream's match splits that
        evicted node there, and the split stamps the part after it most recent (`mem_cache/
        unified_cache/unified_tree_core.py` `_split_node`), so that part becomes a run of its own
        that host eviction reaches last."""
        run_id = self.run_of.get(key)
        if run_id is None:
            return
        run = self.runs[run_id]
        i = run.index(key) + 1
        if i == len(run):
            return
        rest = run[i:]
        self.runs[run_id] = run[:i]
        for k in rest:
            self.run_of[k] = self.next_run
        self.runs[self.next_run] = rest
        self.next_run += 1
        for k in reversed(rest):
            self.held.move_to_end(k)
            self.host_only.move_to_end(k)

    def _link(self, key: int, parent: int | None) -> None:
        self.parent[key] = parent
        if parent is not None:
            self.kids[parent] = self.kids.get(parent, 0) + 1

    def _unlink(self, key: int) -> None:
        parent = self.parent.pop(key, None)
        if parent is not None:
            left = self.kids[parent] - 1
            if left:
                self.kids[parent] = left
            else:
                del self.kids[parent]

    # ---- writes -----------------------------------------------------------------------------
    def write(
        self, keys: list[int], parent: int | None, slots: list[np.ndarray], fetched: bool = False
    ) -> int:
        """Host copies of `keys` (a chain run after `parent`), head first, as upstream writes a
        node's unbacked ancestors first; a page that finds no room ends the write. The run's
        head ends most recent. `slots`: each key's device token slots (empty unless copy events
        are kept); `fetched`: the copies come from storage, not the device (no store event).
        Returns the pages stored."""
        held, events = self.held, self.log.events
        stored, end = 0, len(keys)
        kept: tuple[set[int], set[int]] | None = None  # what no room-making may drop, once
        for i, key in enumerate(keys):
            if key in held:
                continue
            if len(held) + self.reserved >= self.room:
                if kept is None:
                    kept = ({k for ks in self.pins.values() for k in ks}, set(keys))
                if not self._make_room(*kept):
                    end = i
                    break
            held[key] = None
            if key not in self.resident:
                self._link(key, keys[i - 1] if i else parent)
                self.host_only[key] = None
            stored += 1
            if events is not None and not fetched:  # one a page: a later page may drop it
                events.append(HostStore((key,), slots[i], True))
        for key in reversed(keys[:end]):
            held.move_to_end(key)
            if key in self.host_only:
                self.host_only.move_to_end(key)
        return stored

    def write_fetched(self, keys: list[int], parent: int | None) -> list[int]:
        """Pages a storage prefetch brought in (a chain run after `parent`), written like any
        write and kept as one host-only run: upstream inserts them as one host node
        (`mem_cache/unified_radix_cache.py` `_handle_prefetch_result`). Returns the keys
        stored (a copy event fills them from storage: engines/host_pool.py)."""
        new = [k for k in keys if k not in self.held]
        self.write(keys, parent, [], fetched=True)
        stored = [k for k in new if k in self.held]
        if self.log.events is not None and stored:
            self.log.events.append(StorageRead(tuple(stored)))
        run = [k for k in stored if k in self.host_only and k not in self.run_of]
        if run:
            for key in run:
                self.run_of[key] = self.next_run
            self.runs[self.next_run] = run
            self.next_run += 1
        return stored

    def reserve(self, keys: list[int]) -> int:
        """Hold back room for up to len(keys) pages a storage read will bring in, freeing it as a
        write would (never one of `keys`, nor a pinned hit); the pages held back. Upstream
        allocates a prefetch's host pages, evicting host leaves for them, before its I/O thread
        reads into them (`managers/cache_controller.py`)."""
        got, kept = 0, None
        while got < len(keys):
            if len(self.held) + self.reserved < self.room:
                self.reserved += 1
                got += 1
                continue
            if kept is None:
                kept = ({k for ks in self.pins.values() for k in ks}, set(keys))
            if not self._make_room(*kept):
                break
        return got

    def unreserve(self, pages: int) -> None:
        """Room held back for a read is free again (its pages are about to be written)."""
        self.reserved -= pages

    def _make_room(self, pinned: set[int], own: set[int]) -> bool:
        """Drop what upstream would to free a page: under write_back a host copy of a page
        also on the device (not one of this write's `own`), else the least recently used
        host-only leaf's whole run (the part after any `pinned` hit), never one of `own`; False
        when nothing may go."""
        if self.write_back:
            dup = next(
                (k for k in self.dups if k not in pinned and k not in own),
                None,
            )
            if dup is not None:
                self._drop([dup])
                return True
        leaf = next(  # never a page of this write (a prefetch's pages are host-only)
            (k for k in self.host_only if k not in self.kids and k not in pinned and k not in own),
            None,
        )
        if leaf is None:
            return False
        run_id = self.run_of.get(leaf)
        if run_id is None:
            self._drop([leaf])
            return True
        run = self.runs[run_id]
        cut = max((j + 1 for j, k in enumerate(run) if k in pinned), default=0)
        if cut:
            self.runs[run_id] = run[:cut]
        else:
            del self.runs[run_id]
        self._drop(run[cut:][::-1])
        return True

    def _drop(self, keys: list[int]) -> None:
        for key in keys:
            del self.held[key]
            self.host_only.pop(key, None)
            self.dups.pop(key, None)
            self.run_of.pop(key, None)
            if key not in self.resident:
                self._unlink(key)
            self.evicted += 1
            if self.log.events is not None:
                self.log.events.append(HostEvict((key,)))
