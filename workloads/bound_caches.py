"""The caches that `bounds.py` replays requests through, by name: `unbounded` (the ideal), `lru`,
and `belady` (farthest next use first). Each holds chained block keys; a request hits its leading
cached keys (prefix-chain hits), then admits its blocks, at most `capacity` of them, without ever
evicting a block the current request needs.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import OrderedDict, defaultdict

from workloads.registry import Registry


class _Unbounded:
    def __init__(self, capacity: int | None, items: list) -> None:
        self.present: set[int] = set()

    def hits(self, keys: list[int], t: int) -> int:
        lo, hi = 0, len(keys)  # presence is monotone along a chain when nothing is evicted
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if keys[mid - 1] in self.present else (lo, mid - 1)
        return lo

    def admit(self, keys: list[int], t: int) -> None:
        self.present.update(keys)


def _leading(keys: list[int], cache) -> int:
    k = 0
    while k < len(keys) and keys[k] in cache:
        k += 1
    return k


class _LRU:
    def __init__(self, capacity: int, items: list) -> None:
        self.capacity = capacity
        self.cache: OrderedDict[int, None] = OrderedDict()

    def hits(self, keys: list[int], t: int) -> int:
        return _leading(keys, self.cache)

    def admit(self, keys: list[int], t: int) -> None:
        for key in keys[: self.capacity]:  # in chain order: the request's blocks become the newest
            if key in self.cache:
                self.cache.move_to_end(key)
            else:
                self.cache[key] = None
        while len(self.cache) > self.capacity:
            self.cache.popitem(last=False)


class _Belady:
    """Farthest next use first (deeper blocks first on ties, so chains shrink from the tail)."""

    def __init__(self, capacity: int, items: list) -> None:
        self.capacity = capacity
        self.uses: dict[int, list[int]] = defaultdict(list)  # key -> times it is hittable
        t = 0
        for item in items:
            for _ in range(item.num_samples):
                for key in item.hit_keys:
                    self.uses[key].append(t)
                t += 1
        self.never = t + 1
        self.cache: dict[int, int] = {}  # key -> stamp of its live heap entry (-1: pinned)
        self.heap: list[tuple[int, int, int, int]] = []
        self.stamp = 0

    def hits(self, keys: list[int], t: int) -> int:
        return _leading(keys, self.cache)

    def _next_use(self, key: int, t: int) -> int:
        uses = self.uses.get(key, ())
        i = bisect_right(uses, t)
        return uses[i] if i < len(uses) else self.never

    def admit(self, keys: list[int], t: int) -> None:
        keys = keys[: self.capacity]
        for key in keys:  # pin: their heap entries go stale, so eviction skips them
            if key in self.cache:
                self.cache[key] = -1
        for key in keys:
            if key not in self.cache:
                while len(self.cache) >= self.capacity:
                    self._evict()
                self.cache[key] = -1
        for depth, key in enumerate(keys):
            self.stamp += 1
            self.cache[key] = self.stamp
            heapq.heappush(self.heap, (-self._next_use(key, t), -depth, self.stamp, key))

    def _evict(self) -> None:
        while True:
            _, _, stamp, key = heapq.heappop(self.heap)
            if self.cache.get(key) == stamp:
                del self.cache[key]
                return


POLICIES: Registry = Registry("bounds policy")
POLICIES.add("unbounded", _Unbounded)
POLICIES.add("lru", _LRU)
POLICIES.add("belady", _Belady)
