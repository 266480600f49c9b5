"""The stream on which cache_aware's one-at-a-time decisions spread (docs/fleet.md §5): a
placement wave of each group's first prompt, sent at once with long outputs, then the rest one at
a time; the twin's rule spreads the wave by load and sends each later prompt to its group's
worker, and only the waves of one request are scored."""

from __future__ import annotations

from harness.fleet.config import FleetConfig
from harness.fleet.policies import CacheAware, FleetView
from harness.routers.drive import Decision, one_at_a_time
from harness.routers.streams import PLACEMENT_TOKENS, spread_stream

GROUPS = 3


def test_the_placement_wave_holds_each_groups_first_prompt_and_the_rest_go_one_at_a_time():
    stream, plan = spread_stream(GROUPS, per_group=4)
    first, *rest = plan.waves
    assert [r.request_id for r in first] == ["g0-q0", "g1-q0", "g2-q0"]
    assert all(len(w) == 1 for w in rest) and [w[0] for w in rest] == stream[GROUPS:]
    assert plan.max_tokens == {r.request_id: PLACEMENT_TOKENS for r in first}


def test_the_twin_spreads_the_wave_by_load_then_follows_each_groups_prefix():
    """All cold and in flight together, the wave goes one group per worker (the router's order
    first); one at a time each later prompt matches its group above the cache threshold."""
    stream, plan = spread_stream(GROUPS, per_group=4)
    twin = CacheAware(
        FleetConfig(replicas=GROUPS, router="cache_aware"),
        all_tenants=False,
        cold_least_load=True,
        order=[2, 0, 1],
    )
    loads = [0] * GROUPS
    placed = {}
    for req in plan.waves[0]:
        worker = twin.decide(req, FleetView(list(loads), 0.0))
        twin.record(req, worker, 0.0)
        loads[worker] += 1
        placed[req.session_id] = worker
    assert list(placed.values()) == [2, 0, 1]
    for req in stream[GROUPS:]:
        assert twin.decide(req, FleetView([0] * GROUPS, 0.0)) == placed[req.session_id]
        assert twin.ties is None  # a match, not a tie: nothing guessed


def test_only_the_waves_of_one_request_are_scored():
    def made(wave: int, i: int) -> Decision:
        return Decision(f"r{wave}-{i}", 0, 0, 0, wave)

    decisions = [made(1, 0), made(1, 1), made(1, 2), made(2, 0), made(3, 0)]
    assert one_at_a_time(decisions) == decisions[3:]
