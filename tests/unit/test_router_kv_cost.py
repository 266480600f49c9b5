"""vllm-router's kv_aware as the twin predicts it (harness/routers/kv_cost.py): the fewest tokens
to prefill, in-flight requests charged in tokens, ties to the less loaded then the router's own
order; the wave shapes tests/live/test_fleet_real.py checks against the router."""

from __future__ import annotations

from harness.fleet.policies import FleetView, Routed
from harness.routers.kv_cost import IN_FLIGHT_TOKENS, VllmKvAware


def _wave(twin: VllmKvAware, prompt_len: int, cached: list[int], width: int) -> list[int]:
    """`width` requests of one prompt length sent at once, each seeing the ones before in flight."""
    twin.begin_wave()
    loads = [0] * twin.n
    picks = []
    for i in range(width):
        view = FleetView(list(loads), cached=list(cached))
        pick = twin.choose(Routed(f"r{i}", tuple(range(prompt_len))), view)
        loads[pick] += 1
        picks.append(pick)
    return picks


def test_one_at_a_time_the_fewest_new_tokens_win_and_ties_follow_the_routers_order():
    twin = VllmKvAware(3, order=[2, 0, 1])
    assert _wave(twin, 72, [0, 64, 0], 1) == [1]
    assert _wave(twin, 72, [0, 0, 0], 1) == [2]  # a cold prompt: the start log's first worker
    assert _wave(twin, 72, [64, 0, 64], 1) == [2]  # tied credit: the order again


def test_a_short_prefix_loses_part_of_its_wave_and_a_long_one_keeps_it():
    twin = VllmKvAware(3, order=[1, 2, 0])
    # 16 cached tokens save less than one request in flight costs: owner, the two others in the
    # router's order, then the owner again (the others' pending prefill is larger)
    assert _wave(twin, 24, [16, 0, 0], 4) == [0, 1, 2, 0]
    assert _wave(twin, 264, [256, 0, 0], 4) == [0, 0, 0, 0]
    uncharged = VllmKvAware(3, order=[1, 2, 0], in_flight_tokens=0)
    assert _wave(uncharged, 24, [16, 0, 0], 4) == [0, 0, 1, 2]  # pending tokens alone: later


def test_equal_credit_spreads_least_loaded_first():
    twin = VllmKvAware(3, order=[2, 1, 0])
    assert _wave(twin, 72, [64, 64, 64], 6) == [2, 1, 0, 2, 1, 0]


def test_a_new_wave_forgets_the_pending_tokens_and_the_charge_is_recorded():
    twin = VllmKvAware(2, order=[0, 1])
    _wave(twin, 24, [16, 0], 2)
    assert twin.pending != [0, 0]
    twin.begin_wave()
    assert twin.pending == [0, 0]
    assert twin.facts() == {"worker_order": [0, 1], "in_flight_tokens": IN_FLIGHT_TOKENS}
