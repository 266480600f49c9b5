"""What the routing twin learns of a real router instead of assuming it: round robin's own worker
order. vllm-router logs it at start ("Router ready | workers: [...]"); sglang-router shows it only
in its decisions, one worker per decision until the cycle is known. A prediction made while a
slot of the order is still unknown is a guess, counted apart from the learned ones.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from harness.fleet.policies import FleetView, Routed

READY = re.compile(r"Router ready \| workers: \[([^\]]*)\]")
URL = re.compile(r'"([^"]+)"')


def order_from_log(text: str, urls: Sequence[str]) -> list[int] | None:
    """The worker order of vllm-router's start line (indices into `urls`), None when the line
    is absent or names other workers."""
    found = READY.search(text)
    if found is None:
        return None
    listed = URL.findall(found.group(1))
    if sorted(listed) != sorted(urls):
        return None
    return [list(urls).index(u) for u in listed]


def read_order(log: Path, urls: Sequence[str]) -> list[int] | None:
    """order_from_log of a router's log file (None if it cannot be read)."""
    try:
        return order_from_log(log.read_text(errors="replace"), urls)
    except OSError:
        return None


class LearnedRoundRobin:
    """Round robin in the router's own order: given whole (from its start log) or learned slot
    by slot from its decisions. Until a slot is known the guess is the lowest unseen worker; once
    n - 1 slots are known the last one is too."""

    def __init__(self, num_workers: int, order: Sequence[int] | None = None) -> None:
        self.n = num_workers
        self.order: list[int] = list(order) if order is not None else []
        self.source = "start log" if order is not None else "decisions"
        self.pos = 0  # the slot of the cycle the next decision takes

    @property
    def complete(self) -> bool:
        return len(self.order) >= self.n - 1

    @property
    def certain(self) -> bool:
        """Whether the next prediction comes from learned facts alone."""
        return self.pos < len(self.order) or self.complete

    def choose(self, req: Routed, view: FleetView) -> int:
        if self.pos < len(self.order):
            pick = self.order[self.pos]
        else:
            pick = min(i for i in range(self.n) if i not in self.order)
        self.pos = self._after(self.pos)
        return pick

    def learn(self, actual: int) -> None:
        """The router's actual decision: a new slot of the order, or where in the cycle it is."""
        if actual not in self.order:
            self.order.append(actual)
            if len(self.order) == self.n - 1:  # the last worker takes the last slot
                self.order += [i for i in range(self.n) if i not in self.order]
        self.pos = self._after(self.order.index(actual))

    def _after(self, slot: int) -> int:
        return (slot + 1) % self.n if len(self.order) == self.n else slot + 1

    def reset(self) -> None:
        self.pos = 0

    def facts(self) -> dict[str, object]:
        return {"worker_order": list(self.order), "order_source": self.source}
