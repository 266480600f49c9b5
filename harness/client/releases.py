"""Which requests a client sends when: arrival times, a concurrency cap, conversation turns.

    pending (heap of release time, order) ──due(now)──▶ in flight ──finished(id, end_s)──┐
          ▲                                                                             │
          └──── a request `after` X: released think_s after X finishes ◀────────────────┘

`max_concurrency` is `vllm bench serve --max-concurrency`: a request due while the cap is reached
is sent, and its arrival time taken, when a finish frees a slot. Pure bookkeeping with no clock:
the driver owns its clock (the engine's virtual or wall clock, or a server client's monotonic one).
"""

from __future__ import annotations

import heapq
import math

from workloads.request import Request


class ReleaseQueue:
    def __init__(self, requests: list[Request], max_concurrency: int | None = None) -> None:
        self._by_id = {r.request_id: r for r in requests}
        self._order = {r.request_id: i for i, r in enumerate(requests)}
        self._followers: dict[str, list[Request]] = {}
        self._ready: list[tuple[float, int, str]] = []  # (release time, order, request_id)
        for order, req in enumerate(requests):
            if req.after is not None and req.after in self._by_id:
                self._followers.setdefault(req.after, []).append(req)
            else:
                self._ready.append((req.arrival_s, order, req.request_id))
        heapq.heapify(self._ready)
        self.cap = max_concurrency if max_concurrency is not None else len(requests) + 1
        self.in_flight = 0
        self._slot_freed_s = 0.0  # when the cap last stopped being reached

    @property
    def pending(self) -> bool:
        """Requests released or releasable later by time alone (followers wait on finishes)."""
        return bool(self._ready)

    def due(self, now_s: float) -> list[tuple[Request, float]]:
        """The requests to send now, each with its arrival time as the run records it."""
        out = []
        while self._ready and self._ready[0][0] <= now_s and self.in_flight < self.cap:
            t_s, _, rid = heapq.heappop(self._ready)
            self.in_flight += 1
            out.append((self._by_id[rid], max(t_s, self._slot_freed_s)))
        return out

    def next_release_s(self) -> float:
        """When the next request becomes due; inf while the cap is reached or none is pending."""
        if not self._ready or self.in_flight >= self.cap:
            return math.inf
        return self._ready[0][0]

    def next_pending_s(self) -> float:
        """When the next pending request is due, cap or not (inf: none)."""
        return self._ready[0][0] if self._ready else math.inf

    def finished(self, request_id: str, end_s: float) -> None:
        """`request_id` (all its samples) finished at `end_s`: free its slot, release its
        followers think_s later."""
        if self.in_flight == self.cap:
            self._slot_freed_s = end_s
        self.in_flight -= 1
        for nxt in self._followers.pop(request_id, []):
            heapq.heappush(
                self._ready, (end_s + nxt.think_s, self._order[nxt.request_id], nxt.request_id)
            )
