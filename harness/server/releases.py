"""A stand-in for the client layer's `harness.client.releases.ReleaseQueue` ([1/7]) until it lands.

Same interface and rules: requests without `after` are due at their arrival_s; a follower is due
`think_s` after its predecessor finishes; at most `max_concurrency` in flight; a request held
back by the cap is recorded as arriving when the slot frees. Pure logic, no clock.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from workloads.request import Request


class ReleaseQueue:
    def __init__(self, requests: Sequence[Request], max_concurrency: int | None = None) -> None:
        ids = {r.request_id for r in requests}
        self._cap = max_concurrency if max_concurrency is not None else math.inf
        self._ready: list[tuple[float, int, Request]] = []
        self._followers: dict[str, list[tuple[int, Request]]] = {}
        for order, r in enumerate(requests):
            if r.after is not None and r.after in ids:
                self._followers.setdefault(r.after, []).append((order, r))
            else:
                heapq.heappush(self._ready, (r.arrival_s, order, r))
        self.in_flight = 0
        self._slot_freed_s = 0.0

    @property
    def pending(self) -> bool:
        """Requests releasable by time alone (followers wait on finishes)."""
        return bool(self._ready)

    def due(self, now_s: float) -> list[tuple[Request, float]]:
        out = []
        while self._ready and self._ready[0][0] <= now_s and self.in_flight < self._cap:
            t_s, _, req = heapq.heappop(self._ready)
            self.in_flight += 1
            out.append((req, max(t_s, self._slot_freed_s)))
        return out

    def next_release_s(self) -> float:
        if not self._ready or self.in_flight >= self._cap:
            return math.inf
        return self._ready[0][0]

    def finished(self, request_id: str, end_s: float) -> None:
        if self.in_flight >= self._cap:
            self._slot_freed_s = end_s
        self.in_flight -= 1
        for order, r in self._followers.pop(request_id, ()):
            heapq.heappush(self._ready, (end_s + r.think_s, order, r))
