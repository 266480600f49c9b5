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
from harness.routers.rr_cycles import Cycles

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
    """Round robin in the router's own order: given whole (from its start log) or learned from
    its decisions, one at a time or in waves (harness/routers/rr_cycles.py: the candidate
    cycles that explain every wave so far). A wave's prediction is learned when every candidate
    gives it the same workers; until then the guess is the lowest candidate's (one at a time:
    the lowest worker not seen yet; once n - 1 slots are known the last one is too)."""

    def __init__(self, num_workers: int, order: Sequence[int] | None = None) -> None:
        self.n = num_workers
        self.cycles = Cycles.known(order) if order is not None else Cycles.every(num_workers)
        self.source = "start log" if order is not None else "decisions"
        self.pending = 0  # the decisions predicted since the last taught wave
        self.guess = self.cycles.first()
        self.first_slot: int | None = None if order is None else order[0]  # slot 0's worker
        self.slots = 0  # the slots taken since the start (while slot 0's worker is unknown)
        self.waves = 0  # waves taught, the warm-up included
        self.widths: list[int] = []
        self.learned_after: int | None = None  # waves taught when the last width's were settled
        self.lost = 0  # waves no candidate explained (the router's position moved without us)

    @property
    def order(self) -> list[int]:
        """The cycle written from the first decision's worker, as far as it is known."""
        if self.first_slot is None:
            return []
        return self.cycles.common_prefix(self.first_slot)

    @property
    def complete(self) -> bool:
        """Whether one order remains."""
        return len(self.cycles) == 1

    @property
    def certain(self) -> bool:
        """Whether the next prediction comes from learned facts alone."""
        return self.cycles.column(self.pending) is not None

    def certain_for(self, width: int) -> bool:
        """Whether every candidate gives the next wave of `width` the same workers."""
        return self.cycles.agree(width)

    def choose(self, req: Routed, view: FleetView) -> int:
        pick = self.guess[self.pending % self.n]
        self.pending += 1
        return pick

    def learn(self, actual: int) -> None:
        """The router's actual decision: a new slot of the order, or where in the cycle it is."""
        self.learn_wave([actual])

    def learn_wave(self, actuals: Sequence[int]) -> None:
        """The workers a wave's requests went to (in any order): the candidates that explain
        them, moved past the wave."""
        if self.first_slot is None and not self.lost:
            self.first_slot = self.cycles.column(-self.slots)
        self.cycles, explained = self.cycles.after(actuals)
        self.lost += not explained and self.waves > 0  # a start log's order: position unknown
        self.slots += len(actuals)
        if self.first_slot is None and not self.lost:
            self.first_slot = self.cycles.column(-self.slots)
        self.waves += 1
        if len(actuals) not in self.widths:
            self.widths.append(len(actuals))
        if len(actuals) > 1 and self.source == "decisions":
            self.source = "waves"
        # settled: every wave of this width to come gets the same workers from every candidate
        settled = self.cycles.settled([len(actuals)])
        self.learned_after = (self.learned_after or self.waves) if settled else None
        self.pending = 0
        self.guess = self.cycles.first()

    def reset(self) -> None:
        self.pending = 0

    def facts(self) -> dict[str, object]:
        facts: dict[str, object] = {"worker_order": self.order, "order_source": self.source}
        if self.source == "waves":  # what waves could tell, and when
            facts.update(order_candidates=len(self.cycles), wave_widths=list(self.widths))
            facts.update(waves_taught=self.waves, learned_after_waves=self.learned_after)
        if self.lost or self.source == "waves":
            facts.update(position_lost=self.lost)
        return facts
