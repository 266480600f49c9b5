"""Why the twin missed a cache_aware decision in a wave of requests sent at once: the wave replayed
through the twin's rule in every order the requests could have reached the router.

A wave the twin's rule reproduces in send order, once the ties it broke by a worker order not yet
known go the router's way, missed by `tie` only; one it reproduces in another order, by `arrival`
order; one no order reproduces, `other` (a request finishing inside its wave, a rule the twin
lacks). The ties the successful replay settled teach the twin the router's worker order.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence

from harness.fleet.policies import CacheAware, FleetView, Routed

TIE, ARRIVAL, OTHER = "tie", "arrival", "other"
MAX_ORDERS = 5040  # 7! orders; a wider wave is replayed in the first 5,040 orders only


def replay(
    twin: CacheAware, wave: Sequence[Routed], actual: Sequence[int], num_workers: int, now: float
) -> tuple[str, list[int]] | None:
    """(cause, the worker order the replay settled) of the first order of `wave` (send order
    first) in which the twin's rule makes the router's decisions `actual`; None when none does.
    `twin` is left as it is."""
    orders = itertools.islice(itertools.permutations(range(len(wave))), MAX_ORDERS)
    for k, order in enumerate(orders):
        settled = _replayed(
            twin, [wave[i] for i in order], [actual[i] for i in order], num_workers, now
        )
        if settled is not None:
            return (TIE if k == 0 else ARRIVAL), settled
    return None


def _replayed(
    twin: CacheAware, wave: list[Routed], actual: list[int], num_workers: int, now: float
) -> list[int] | None:
    """The worker order after the twin made `actual` for `wave` in this order, ties it broke by an
    unknown order allowed to go the router's way; None when a decision differs otherwise."""
    t = copy.deepcopy(twin)
    loads = [0] * num_workers
    for req, got in zip(wave, actual):
        guess = t.decide(req, FleetView(list(loads), now))
        if guess != got:
            ties = t.ties
            if ties is None or got not in ties or not _open(t, ties, got):
                return None
            t.learn_tie(ties, got)
        t.record(req, got, now)
        loads[got] += 1
    return t.order


def _open(twin: CacheAware, ties: Sequence[int], got: int) -> bool:
    """Whether the known order leaves `got` free to win the tie: no tied worker is known to come
    before it."""
    if got in twin.order:
        return False  # known and still not first: the order says otherwise
    return not any(i in twin.order for i in ties)
