"""Round robin at 3 workers, where a wrong worker order is wrong (at 2 either order is a
rotation): the twin takes vllm-router's order from its start log and learns sglang-router's from
its decisions; it is scored only on decisions predicted from learned facts, its guesses and the
router's first pick reported apart, and what it learned is recorded beside the decisions.
cache_aware at 3 workers on a stream whose one-at-a-time decisions spread (the groups placed by
a first wave through the router), and its ties under concurrency.

Bounded: 3 built-in workers started once, each case's router started and stopped by its PID
(harness.routers.fleet.processes); the routers missing: a failure under CI=true, else a skip.
"""

from __future__ import annotations

import json

import pytest

from harness.fleet.config import FleetConfig
from harness.routers.drive import one_at_a_time
from harness.routers.fleet import route_through, streams
from harness.routers.streams import spread_stream
from tests.router_util import module_workers, need_router

WORKERS = 3


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    yield from module_workers(tmp_path_factory, "fleet-learned", WORKERS)


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_round_robin_in_the_routers_own_order_at_3_workers(kind, workers):
    need_router(kind)
    fleet, out = workers
    stream, warm = streams("round_robin", num_groups=3, per_group=4, num_workers=WORKERS)
    cfg = FleetConfig(replicas=WORKERS, router="round_robin")
    decisions = route_through(kind, cfg, fleet, stream, out, warm)
    assert sorted(d.actual for d in decisions) == [0] * 4 + [1] * 4 + [2] * 4  # spread
    scored = [d for d in decisions if d.learned]
    guesses = [d for d in decisions if not d.learned]
    assert sum(d.predicted == d.actual for d in scored) >= 0.99 * len(scored)
    facts = json.loads((out / f"learned-{kind}-round_robin.json").read_text())
    assert sorted(facts["worker_order"]) == list(range(WORKERS))
    assert facts["first_pick"] in range(WORKERS)
    if kind == "vllm":  # the start log names the order: nothing to guess
        assert facts["order_source"] == "start log" and not guesses
        assert facts["first_pick_learned"] is True
    else:  # one slot of the cycle is unknown after the first pick; the last follows
        assert facts["order_source"] == "decisions" and len(guesses) <= 1
    assert len(scored) >= len(stream) - 1


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_cache_aware_one_at_a_time_spreads_once_the_groups_are_placed(kind, workers):
    """One at a time every cold prompt goes to the router's first worker, so a stream of cold
    groups collapses onto it. Here each group's first prompt goes through the router in one
    wave (long outputs, all in flight together: each to the least loaded worker), then the rest
    one at a time: each follows its group's prefix to the worker its tree names. Two router
    starts, each its own worker order; the placement wave is taught to the twin, not scored."""
    need_router(kind)
    fleet, out = workers
    stream, waves = spread_stream(num_groups=WORKERS, per_group=4)
    cfg = FleetConfig(replicas=WORKERS, router="cache_aware")
    for start in range(2):
        decisions = route_through(
            kind, cfg, fleet, stream, out / f"spread-{kind}-s{start}", waves=waves
        )
        alone = one_at_a_time(decisions)
        assert len(alone) == len(stream) - WORKERS
        placed = {d.request_id.split("-")[0]: d.actual for d in decisions if d not in alone}
        assert len(set(placed.values())) >= 2  # the placement wave spread the groups
        # each later prompt went where its group was placed, and hit the prefix computed there
        assert all(d.actual == placed[d.request_id.split("-")[0]] for d in alone), decisions
        assert all(d.cached_tokens > 0 for d in alone)
        scored = [d for d in alone if d.learned]
        assert len(scored) == len(alone)  # no tie to guess: every prompt matched its group
        assert sum(d.predicted == d.actual for d in scored) >= 0.99 * len(scored), decisions


def test_cache_aware_ties_go_the_routers_way_and_every_miss_has_its_cause(workers):
    """sglang-router's cache_aware at 3 workers, waves of 4 (one at a time it sends every cold
    prompt to its first worker, so only waves spread a stream): two router starts, each with its
    own worker order. The first pick teaches the twin the router's first worker; a miss is
    replayed in every arrival order (harness/routers/replay.py) and named for its cause."""
    need_router("sglang")
    fleet, out = workers
    stream, warm = streams("cache_aware", num_groups=6, per_group=2, num_workers=WORKERS)
    cfg = FleetConfig(replicas=WORKERS, router="cache_aware")
    for start in range(2):
        decisions = route_through("sglang", cfg, fleet, stream, out / f"s{start}", warm, 4)
        assert len({d.actual for d in decisions}) >= 2  # the stream spread
        facts = json.loads((out / f"s{start}" / "learned-sglang-cache_aware.json").read_text())
        assert facts["worker_order"][0] in range(WORKERS)
        assert all((d.cause == "") == (d.predicted == d.actual) for d in decisions)
        assert sum(d.cause == "other" for d in decisions) <= 1, decisions
