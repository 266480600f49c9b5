"""Which host chunk to drop: vLLM's CPU offloading policies, LRU and ARC (vLLM 0.33
`vllm/v1/kv_offload/cpu/policies/{lru,arc}.py`; docs/tiers.md §2.3).

A policy orders the chunks the host tier holds and picks eviction victims among the ready ones
(a chunk being written is never evicted). Both see a request's accesses once, when it finishes,
head to tail reversed so the prompt's head ends most recent.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from engines.registry import Registry

Key = bytes


class LruPolicy:
    """Least recently used: a store or a finished request's access makes a chunk most recent."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.order: OrderedDict[Key, None] = OrderedDict()  # oldest first

    def __contains__(self, key: Key) -> bool:
        return key in self.order

    def insert(self, key: Key) -> None:
        self.order[key] = None

    def on_store_miss(self, keys: list[Key]) -> None:
        """Nothing: LRU learns only from stores and finished requests."""

    def on_request_finished(self, keys: list[Key], inserted: set[Key], reused: set[Key]) -> None:
        for key in reversed(keys):  # the tail first, so the head ends most recent
            if key in self.order:
                self.order.move_to_end(key)

    def evict(self, n: int, evictable: set[Key], protected: set[Key]) -> list[Key] | None:
        victims: list[Key] = []
        for key in self.order:
            if len(victims) == n:
                break
            if key in evictable and key not in protected:
                victims.append(key)
        if len(victims) < n:
            return None
        for key in victims:
            del self.order[key]
        return victims

    def clear(self) -> None:
        self.order.clear()


class ArcPolicy:
    """Adaptive replacement: new chunks enter T1, a chunk a request reuses moves to T2; eviction
    takes T1's oldest while T1 is at least its adaptive target, else T2's; evicted keys become
    ghosts (B1, B2) whose later store misses move the target."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.target_t1 = 0.0
        self.t1: OrderedDict[Key, None] = OrderedDict()
        self.t2: OrderedDict[Key, None] = OrderedDict()
        self.b1: OrderedDict[Key, None] = OrderedDict()
        self.b2: OrderedDict[Key, None] = OrderedDict()

    def __contains__(self, key: Key) -> bool:
        return key in self.t1 or key in self.t2

    def insert(self, key: Key) -> None:
        self.t1[key] = None
        self.b1.pop(key, None)
        self.b2.pop(key, None)

    def on_store_miss(self, keys: list[Key]) -> None:
        for key in reversed(keys):
            if key in self.b1:
                delta = max(1.0, len(self.b2) / len(self.b1))
                self.target_t1 = min(self.target_t1 + delta, self.capacity)
                self.b1.move_to_end(key)
            elif key in self.b2:
                delta = max(1.0, len(self.b1) / len(self.b2))
                self.target_t1 = max(self.target_t1 - delta, 0.0)
                self.b2.move_to_end(key)

    def on_request_finished(self, keys: list[Key], inserted: set[Key], reused: set[Key]) -> None:
        for key in reversed(keys):
            if key in inserted:  # a store is not a reuse: recency only, in its own list
                for lst in (self.t1, self.t2):
                    if key in lst:
                        lst.move_to_end(key)
                continue
            if key in reused and key in self.t1:
                del self.t1[key]
                self.t2[key] = None
            elif key in reused and key in self.t2:
                self.t2.move_to_end(key)

    def evict(self, n: int, evictable: set[Key], protected: set[Key]) -> list[Key] | None:
        def candidates(lst: OrderedDict[Key, None]) -> Iterable[Key]:
            return (k for k in lst if k in evictable and k not in protected)

        t1_iter, t2_iter = iter(candidates(self.t1)), iter(candidates(self.t2))
        picked: list[tuple[Key, bool]] = []
        t1_size = len(self.t1)
        for _ in range(n):
            choice: tuple[Key, bool] | None = None
            if t1_size >= int(self.target_t1):
                key = next(t1_iter, None)
                if key is not None:
                    choice, t1_size = (key, True), t1_size - 1
            if choice is None:
                key = next(t2_iter, None)
                if key is not None:
                    choice = (key, False)
            if choice is None:
                key = next(t1_iter, None)
                if key is None:
                    return None
                choice, t1_size = (key, True), t1_size - 1
            picked.append(choice)
        for key, from_t1 in picked:
            if from_t1:
                del self.t1[key]
                self.b1[key] = None
            else:
                del self.t2[key]
                self.b2[key] = None
        for ghosts in (self.b1, self.b2):
            while len(ghosts) > self.capacity:
                ghosts.popitem(last=False)
        return [key for key, _ in picked]

    def clear(self) -> None:
        for lst in (self.t1, self.t2, self.b1, self.b2):
            lst.clear()
        self.target_t1 = 0.0


Policy = LruPolicy | ArcPolicy

# registry: the host tier's eviction policies (engine.host_tier.policy)
POLICIES: Registry[type[LruPolicy] | type[ArcPolicy]] = Registry("host tier policy")
POLICIES.add("lru", LruPolicy)
POLICIES.add("arc", ArcPolicy)
