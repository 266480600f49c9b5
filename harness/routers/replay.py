"""Why the twin missed a cache_aware decision in a wave of requests sent at once: the orders in
which the wave's requests could have reached the router, searched for one in which the twin's rule
makes the router's decisions.

A wave the twin's rule reproduces in send order, once the ties it broke by a worker order not yet
known go the router's way, missed by `tie` only; one it reproduces in another order, by `arrival`
order; one no order reproduces, `other` (a request finishing inside its wave, a rule the twin
lacks). The ties of the order found teach the twin the router's worker order.

The search builds an arrival order one request at a time: the next request is each one not yet
placed, tried in send order, and kept only if the rule sends it where the router did (its decision
looked at first, the twin copied only for a request kept). So an order is dropped at its first
wrong decision, not after all of it, and the order found is the first in lexicographic order
(send order first), however wide the wave: until 2026-12-07 the replay walked the orders
themselves and stopped after 5,040, which at 16 requests never moved the first 9, so a whole-group
swap there was `other`. A state (the requests placed, the worker order learned) found to lead
nowhere is not entered again (the tree's access times, which two orders reaching it may have set
differently, are not part of it), and what holds in every order (harness/routers/wave_shape.py:
groups that fail alone, cold decisions the loads cannot take, a match stuck off the router's
worker, requests that are the same to the router) drops an order early or leaves it untried, so a
wave no order reproduces is mostly proved so at once. After MAX_STATES states a search stops, its
wave `other` (no order found) with `Replayed.exhausted` set.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.fleet.policies import CacheAware, FleetView, Routed
from harness.routers.wave_shape import WaveShape

TIE, ARRIVAL, OTHER = "tie", "arrival", "other"
# States one search may enter, ~1 ms each at 16 requests over a tree of ~60 prompts. An order
# that exists took 16 (one per request) in each of 60 shuffled 16-wide waves (2026-12-07)
MAX_STATES = 2_000


@dataclass(frozen=True)
class Replayed:
    """A search's outcome: the cause of the wave's misses, the arrival order found (indices into
    the wave; None for `other`), the worker order it settled, the states it entered, and whether
    it stopped at MAX_STATES rather than running out of orders."""

    cause: str
    order: list[int] | None
    settled: list[int]
    states: int
    exhausted: bool = False


def replay(
    twin: CacheAware, wave: Sequence[Routed], actual: Sequence[int], num_workers: int, now: float
) -> tuple[str, list[int]] | None:
    """(cause, the worker order the replay settled) of the first order of `wave` (send order
    first) in which the twin's rule makes the router's decisions `actual`; None when none does.
    `twin` is left as it is."""
    found = search(twin, wave, actual, num_workers, now)
    return None if found.cause == OTHER else (found.cause, found.settled)


def search(
    twin: CacheAware,
    wave: Sequence[Routed],
    actual: Sequence[int],
    num_workers: int,
    now: float,
    max_states: int = MAX_STATES,
) -> Replayed:
    """The search itself (the module's docstring), with what it found and how far it went."""
    root = copy.deepcopy(twin)
    if wave:  # a decision looked at: the tree's periodic eviction, if due, happens here once
        root.decide(wave[0], FleetView([0] * num_workers, now), touch=False)
    walk = _Walk(WaveShape.of(root, wave, actual, num_workers, now), max_states)
    loads = [0] * num_workers
    impossible = walk.shape.hopeless(loads, 0, root) or walk.shape.a_group_fails(root)
    found = None if impossible else walk.extend(root, 0, loads, [])
    if found is None:
        return Replayed(OTHER, None, list(twin.order), walk.states, walk.states >= max_states)
    order, settled = found
    cause = TIE if order == list(range(len(wave))) else ARRIVAL
    return Replayed(cause, order, settled, walk.states)


@dataclass
class _Walk:
    """One search: the wave's shape, the states entered and those found to lead nowhere."""

    shape: WaveShape
    max_states: int
    dead: set[tuple[int, tuple[int, ...]]] = field(default_factory=set)
    states: int = 0

    def extend(
        self, twin: CacheAware, placed: int, loads: list[int], order: list[int]
    ) -> tuple[list[int], list[int]] | None:
        """(the arrival order, the worker order settled) completing `order`, whose requests
        (the bits of `placed`) left `twin` and `loads`; None when no completion reproduces."""
        shape = self.shape
        if len(order) == len(shape.wave):
            return order, list(twin.order)
        if self.states >= self.max_states:
            return None
        self.states += 1
        later = shape.not_next(twin, placed)
        for i, req in enumerate(shape.wave):
            if placed >> i & 1 or i in later:
                continue
            got, nxt = shape.actual[i], placed | 1 << i
            learned = self._kept(twin, req, got, loads)
            if learned is None or (nxt, tuple(learned)) in self.dead:
                continue
            more = list(loads)
            more[got] += 1
            if shape.hopeless(more, nxt):
                continue
            after = copy.deepcopy(twin)
            after.decide(req, FleetView(list(loads), shape.now))  # the router's match marks
            after.order = learned
            after.record(req, got, shape.now)
            if shape.hopeless(more, nxt, after):
                self.dead.add((nxt, tuple(learned)))
                continue
            found = self.extend(after, nxt, more, [*order, i])
            if found is not None:
                return found
        if self.states < self.max_states:  # a search cut short proved nothing
            self.dead.add((placed, tuple(twin.order)))
        return None

    def _kept(self, twin: CacheAware, req: Routed, got: int, loads: list[int]) -> list[int] | None:
        """The worker order after `req` arrives next and the rule sends it to `got` (a tie it
        broke by an unknown order allowed to go the router's way); None when it cannot."""
        guess = twin.decide(req, FleetView(list(loads), self.shape.now), touch=False)
        if guess == got:
            return list(twin.order)
        ties = twin.ties
        if ties is None or got not in ties or not _open(twin, ties, got):
            return None
        probe = copy.copy(twin)  # the tree shared, read by nothing here: only the order learns
        probe.order = list(twin.order)
        probe.learn_tie(ties, got)
        return probe.order


def _open(twin: CacheAware, ties: Sequence[int], got: int) -> bool:
    """Whether the known order leaves `got` free to win the tie: no tied worker is known to come
    before it."""
    if got in twin.order:
        return False  # known and still not first: the order says otherwise
    return not any(i in twin.order for i in ties)
