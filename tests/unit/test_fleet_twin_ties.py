"""The routing twin's cache_aware tie-break (docs/fleet.md §5): a cold prompt goes to the least
loaded worker, a tie to the first of them in the router's own worker order, which the twin learns
from the router's tie decisions (sglang-router shows it nowhere else) instead of assuming URL
order or the smallest tree; the simulated fleet keeps the smallest tree."""

from __future__ import annotations

from harness.fleet.config import FleetConfig
from harness.fleet.policies import CacheAware, FleetView, Routed

CFG = FleetConfig(replicas=3, router="cache_aware")


def _cold(i: int) -> Routed:
    return Routed(f"r{i}", f"unrelated prompt number {i} " * 4)


def _twin(order: list[int] | None = None) -> CacheAware:
    return CacheAware(CFG, all_tenants=False, cold_least_load=True, order=order)


def test_a_three_way_tie_goes_to_the_routers_first_worker_not_the_smallest_tree():
    twin = _twin(order=[2, 0, 1])
    twin.record(_cold(0), 0, 0.0)  # worker 0 holds a tree, 1 and 2 none
    assert twin.decide(_cold(1), FleetView([0, 0, 0], 0.0)) == 2
    assert twin.ties == [0, 1, 2]
    assert twin.decide(_cold(2), FleetView([0, 0, 1], 0.0)) == 0  # the least loaded first


def test_the_order_is_learned_from_the_routers_tie_decisions():
    twin = _twin()
    twin.learn_tie([0, 1, 2], 1)  # the warm-up: every worker idle, the router took worker 1
    assert twin.order == [1]
    assert twin.decide(_cold(0), FleetView([0, 0, 0], 0.0)) == 1
    twin.learn_tie([0, 2], 2)  # worker 1 busy: of the other two the router took 2
    assert twin.order == [1, 2]
    assert twin.decide(_cold(1), FleetView([0, 1, 0], 0.0)) == 2
    twin.learn_tie([0, 1], 0)  # 0 before 1, learned against what was known: moved before it
    assert twin.order == [0, 1, 2]
    twin.learn_tie([1, 2], 0)  # the router saw other loads (arrival order): nothing learned
    assert twin.order == [0, 1, 2]


def test_the_simulated_cache_aware_keeps_the_smallest_tree():
    sim = CacheAware(CFG)
    sim.record(_cold(0), 0, 0.0)
    sim.record(_cold(1), 0, 0.0)
    sim.record(_cold(2), 1, 0.0)
    assert sim.decide(_cold(3), FleetView([0, 0, 0], 0.0)) == 2  # the empty tree
    assert sim.ties is None


def test_a_missed_wave_is_replayed_for_its_cause():
    """Two cold prompts sent at once, the router's first worker known (0): the second reaching
    the router first is arrival order, an unknown tie-break is a tie, neither is other."""
    from harness.routers.replay import ARRIVAL, TIE, replay

    twin = _twin(order=[0])
    wave = [_cold(0), _cold(1)]
    assert replay(twin, wave, [0, 2], 3, 0.0) == (TIE, [0, 2])  # 2 before 1: learned
    assert replay(twin, wave, [2, 0], 3, 0.0) == (ARRIVAL, [0, 2])  # the second came first
    assert replay(twin, wave, [1, 1], 3, 0.0) is None  # no order makes both go to worker 1
    assert twin.order == [0]  # the replays leave the twin as it was
